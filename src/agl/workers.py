"""Spread one run's requests over several processes (`workers`), for fast API backends.

One asyncio loop drives an SDK at a few milliseconds of CPU per request, so at high
concurrency the client itself, not the server, limits throughput. With `workers: N` the
pending requests are dealt round-robin to N spawned processes, each running the ordinary
runner (`agl.inference.stream`) with its share of the concurrency limit (the limits add up
to `concurrency`), its own backend and the shared on-disk cache (entries are written
atomically, so processes never see half an entry). Replies come back to the parent, which
alone writes the predictions file, so resume and durability are unchanged.

Workers die with the parent (Linux PR_SET_PDEATHSIG): a killed run leaves no orphan still
spending quota. Local models should keep `workers: 1` (each process would load its own
copy), and so should baselines that `prepare` on the whole manifest (each would redo it).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue as queue_mod
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from agl.backends.base import Reply, Request
from agl.errors import AglError

_DONE = "done"


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover - no libc: the worker ends when its shard does
            pass


def _worker(k: int, backend_name: str, model: str, settings: dict[str, Any],
            shard: list[tuple[int, Request]], clips: Sequence[Any], audio_root: Path | None,
            cache_dir: Path | None, concurrency: int, timeout_s: float, max_retries: int,
            backoff: Any, out: Any) -> None:
    _die_with_parent()
    from agl.backends.base import get_backend
    from agl.cache import ResponseCache
    from agl.inference import stream

    async def go() -> None:
        backend = get_backend(backend_name)(model, **settings)
        try:
            backend.prepare(clips, audio_root)
            cache = ResponseCache(cache_dir) if cache_dir is not None else None
            requests = [r for _, r in shard]
            async for j, reply in stream(backend, requests, cache=cache,
                                         concurrency=concurrency, timeout_s=timeout_s,
                                         max_retries=max_retries, backoff=backoff):
                out.put((shard[j][0], reply))
        finally:
            await backend.aclose()

    try:
        asyncio.run(go())
    except BaseException as exc:  # reported to the parent, which stops the run
        out.put((_DONE, k, f"{type(exc).__name__}: {exc}"))
        return
    out.put((_DONE, k, None))


async def stream_in_processes(
    backend_name: str, model: str, settings: dict[str, Any], requests: Sequence[Request], *,
    workers: int, clips: Sequence[Any], audio_root: Path | None, cache_dir: Path | None,
    concurrency: int, timeout_s: float, max_retries: int, backoff: Any,
) -> AsyncIterator[tuple[int, Reply]]:
    """Like `agl.inference.stream`, with the requests spread over `workers` processes."""
    workers = max(1, min(workers, len(requests), concurrency))
    ctx = mp.get_context("spawn")  # fork is unsafe in a process that already runs threads
    out = ctx.Queue()
    shards = [[(i, r) for i, r in enumerate(requests) if i % workers == k]
              for k in range(workers)]
    # Share the concurrency limit so the total in flight stays `concurrency`.
    limits = [concurrency // workers + (1 if k < concurrency % workers else 0)
              for k in range(workers)]
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(k, backend_name, model, settings, shards[k], list(clips),
                               audio_root, cache_dir, limits[k], timeout_s, max_retries,
                               backoff, out))
             for k in range(workers)]
    for p in procs:
        p.start()
    running = set(range(workers))
    try:
        while running:
            try:
                item = await asyncio.to_thread(out.get, True, 1.0)
            except queue_mod.Empty:
                dead = [k for k in running if not procs[k].is_alive()]
                if dead and out.empty():
                    raise AglError(f"inference worker {dead[0]} exited with code "
                                   f"{procs[dead[0]].exitcode} before finishing its share")
                continue
            if item[0] == _DONE:
                _, k, error = item
                if error:
                    raise AglError(f"inference worker {k} failed: {error}")
                running.discard(k)
                continue
            i, reply = item
            yield i, reply
    finally:
        for p in procs:  # finished workers exit by themselves; others are stopped
            p.join(timeout=0 if running else 5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
