"""The `local` executor: the async runner in this process (`agl.inference.runner.stream`).

Concurrency, the per-request timeout, retries with backoff and the response cache are the
runner's; this only hands each reply to the driver's sink as it arrives.
"""

from __future__ import annotations

import contextlib
from typing import Any

from agl.backends.base import Backend
from agl.inference.cache import ResponseCache
from agl.inference.executors import Executor
from agl.inference.runner import stream
from agl.inference.spend import SPEND, SpendCap, recorded_spend
from agl.inference.work import Answer, Sink, Work


class LocalExecutor(Executor):
    """Every request through the runner, at most `work.options.concurrency` in flight."""

    name = "local"  # its entry in the index (agl.inference.executors)
    local = True

    async def answer(self, work: Work, backend: Backend, sink: Sink) -> Any:
        """Stream the replies of `work.requests` into `sink` in the order they arrive."""
        o = work.options
        cache = ResponseCache(o.cache_dir) if o.cache_dir is not None else None
        requests = list(work.requests)
        spend = None
        total = o.max_total_spend_usd
        if o.max_spend_usd is not None or total is not None:
            # params.yaml infer.max_spend_usd / max_total_spend_usd (agl.inference.spend); the
            # build's records are read only under a total, here, before this run sends.
            spend = SpendCap(None if o.max_spend_usd is None else float(o.max_spend_usd),
                             work.spec.price_in_per_m, work.spec.price_out_per_m,
                             dict(work.spec.settings or {}), work.spec.price_audio_in_per_m,
                             total_usd=None if total is None else float(total),
                             recorded_usd=recorded_spend(o.spend_roots) if total is not None else 0.0)
        token = SPEND.set(spend)  # each request's task inherits it
        try:
            replies = stream(backend, requests, cache=cache, concurrency=o.concurrency,
                             timeout_s=o.timeout_s, max_retries=o.max_retries,
                             backoff=o.backoff, offline_after=o.offline_after)
            # Closed at once when the sink fails (a write error stops the run): the requests
            # still in flight are cancelled, not left running.
            async with contextlib.aclosing(replies):
                async for i, reply in replies:
                    await sink.put(Answer(requests[i], reply))
        finally:
            SPEND.reset(token)
        return None
