"""A run cut into shards, and what one shard does where it runs (a Ray worker or actor).

The shards themselves are planned by `agl.executor.shards.plan_shards` (sorted ids dealt
round-robin: a pure function of the ids and the count), the planner curation shares.

A shard answers through a collector (`agl.inference.executors.ray_cluster`), never a file:
it first asks the collector which of its ids are still unanswered (a shard retried after its
node died asks only those), then runs today's async runner over them (concurrency, timeout,
retries, Retry-After cap) and posts each reply as it arrives. The reply cache is the driver's:
a shard never reads or writes it (the driver left out what the cache answers before planning).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import Any

from agl.backends.base import Backend, get_backend
from agl.inference.runner import stream
from agl.inference.work import Work


def build_backend(work: Work) -> Backend:
    """The backend of `work.spec`, bounded by the run's reply caps and prepared with the
    manifest (what the driver did for its own)."""
    spec = work.spec
    backend = work.options.bound(get_backend(spec.backend)(spec.model, **dict(spec.settings or {})))
    backend.prepare(list(work.clips), work.audio_root)
    return backend


def serve_shard(work: Work, shard: int, backend: Backend, collector: Any, node: str, *,
                close: bool) -> dict[str, Any]:
    """Answer what the collector says shard `shard` of `work` still misses; post each reply.
    `close`: close the backend afterwards (a task's; an actor keeps its model for the next
    shard). Returns the shard's facts (node, clips asked, seconds) for the run's timings."""
    import ray  # a Ray worker's: this function only runs inside one

    t0 = time.time()
    missing = set(ray.get(collector.start.remote(shard, node, [r.sample_id for r in work.requests])))
    todo = [r for r in work.requests if r.sample_id in missing]
    asyncio.run(_post_replies(backend, replace(work, requests=tuple(todo)), shard, node, collector,
                              close))
    return {"shard": shard, "node": node, "asked": len(todo), "skipped": len(work.requests) - len(todo),
            "started": round(t0, 3), "seconds": round(time.time() - t0, 3)}


async def _post_replies(backend: Backend, work: Work, shard: int, node: str, collector: Any,
                        close: bool) -> None:
    o = work.options
    requests = list(work.requests)
    try:
        if not requests:
            return
        replies = stream(backend, requests, cache=None, concurrency=o.concurrency, timeout_s=o.timeout_s,
                         max_retries=o.max_retries, backoff=o.backoff, offline_after=o.offline_after)
        async with contextlib.aclosing(replies):
            async for i, reply in replies:
                # Awaited: a reply counts as answered once the driver's collector holds it.
                await collector.put.remote(shard, node, [(requests[i].sample_id, reply)])
    finally:
        if close:
            await backend.aclose()
