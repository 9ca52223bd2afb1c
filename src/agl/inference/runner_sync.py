"""`complete` for synchronous callers (a judge, a curation pass): build the backend, run, close.

The async runner (`agl.inference.runner`) sends the requests; this is its one-call face for
code that is not itself async and runs no model run of its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agl.backends.base import get_backend
from agl.contracts.calls import Reply, Request
from agl.inference.cache import ResponseCache
from agl.inference.runner import RunOptions, complete

_QUIET = RunOptions(progress=False)  # complete_sync's default: no progress bar


def complete_sync(
    backend_name: str,
    model: str,
    requests: list[Request],
    *,
    settings: dict[str, Any] | None = None,
    options: RunOptions = _QUIET,
) -> list[Reply]:
    """`complete` for synchronous callers: builds the backend, runs, closes it. Replies come
    in request order; a failure is a `FAILED` reply. `options.limit` must be None."""
    if options.limit is not None:
        raise ValueError("complete_sync sends every request; RunOptions.limit is for run_inference")
    backend = options.bound(get_backend(backend_name)(model, **(settings or {})))
    cache = ResponseCache(options.cache_dir) if options.cache_dir is not None else None

    async def go() -> list[Reply]:
        try:
            return await complete(backend, requests, cache=cache, concurrency=options.concurrency,
                                  timeout_s=options.timeout_s, max_retries=options.max_retries,
                                  progress=options.progress, backoff=options.backoff)
        finally:
            await backend.aclose()

    return asyncio.run(go())
