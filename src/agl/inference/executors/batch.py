"""The `batch` executor: the provider's batch API (`agl.inference.batch`), for a model entry
with `settings.mode: batch`.

One pass under the run folder's lock: the jobs that finished are collected (their answers go
to the sink, durable before a job leaves the state file), new clips are submitted, and what
batch cannot take (a refused model, a cache hit, a failed batch request after its fallback)
goes through the `local` executor, each reply saying so (`answered_by`, `batch_fallback`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend
from agl.core.secrets import known_secrets, scrub_text
from agl.core.single_writer import exclusive
from agl.inference.batch.context import PassContext, PassReport
from agl.inference.batch.options import batch_options
from agl.inference.batch.report import batch_summary
from agl.inference.batch.report import summary_text as batch_text  # the batch part of the run's line
from agl.inference.batch.run import run_pass
from agl.inference.cache import ResponseCache
from agl.inference.executors import Executor, get_executor
from agl.inference.work import Answer, Sink, Work


class _Tagged:
    """The synchronous path's sink in batch mode: each reply says how it was answered
    (`answered_by: sync | cache`) and, after a batch failure, why (`batch_fallback`)."""

    def __init__(self, sink: Sink, reasons: dict[str, str]):
        self.sink, self.reasons = sink, reasons

    async def put(self, answer: Answer) -> None:
        reply = answer.reply
        extra = {"answered_by": "cache" if reply.extra.get("cached") else "sync"}
        if answer.request.sample_id in self.reasons:
            extra["batch_fallback"] = self.reasons[answer.request.sample_id]
        await self.sink.put(replace(answer, reply=replace(reply, extra={**reply.extra, **extra})))

    async def flush(self) -> None:
        await self.sink.flush()


class BatchExecutor(Executor):
    """A batch pass, then the synchronous path for the clips batch does not answer."""

    name = "batch"  # its entry in the index (agl.inference.executors)
    instead = "without mode: batch"
    # A batch record says who answered it and at what price (half, `answered_by`): served
    # again from the cache it would read as a synchronous answer. Kept as is.
    rederives = False

    def check(self, out_dir: Path) -> None:
        """Nothing to refuse: live jobs are what this executor collects."""
        return None

    async def answer(self, work: Work, backend: Backend, sink: Sink) -> PassReport:
        """Collect, submit and fall back (`agl.inference.batch.run`); the report says what is out."""
        o = work.options
        ctx = PassContext(backend=backend, out_dir=Path(work.out_dir),
                          cache=ResponseCache(o.cache_dir) if o.cache_dir is not None else None,
                          fingerprint=work.fingerprint,
                          options=batch_options(backend.name, backend.settings),
                          timeout_s=o.timeout_s, concurrency=o.concurrency, finished=work.finished)
        # One process per run folder while jobs are submitted and clips fall back: a second
        # one would submit or request the same clips again.
        with exclusive(work.out_dir, "this run's batch jobs"):
            report = await run_pass(ctx, list(work.requests), sink)
            secrets = known_secrets(backend.settings)  # a provider's error may quote the key
            for line in report.messages:
                print(scrub_text(f"batch: {line}", secrets), file=sys.stderr)
            await get_executor("local").answer(replace(work, requests=tuple(report.sync_now)),
                                               backend, _Tagged(sink, report.reasons))
        return report

    def summarize(self, summary: dict[str, Any], chosen: Sequence[Any], settings: dict[str, Any],
                  out_dir: Path, report: Any) -> dict[str, Any]:
        """The summary's batch section (`agl.inference.batch.report.batch_summary`)."""
        return batch_summary(summary, list(chosen), settings, out_dir, report)

    def summary_text(self, summary: dict[str, Any]) -> str:
        """Batch, synchronous and cached answers, the price, and what is still out."""
        return batch_text(summary)
