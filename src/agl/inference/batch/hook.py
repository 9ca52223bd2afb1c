"""Where the runner (`agl.inference.runner.run_inference`) meets batch mode: three small calls.

    with batch_session(backend, requests, run=ctx, ...) as batch:   # a pass, under the run's lock
        source = batch.tag(stream(backend, batch.requests, ...), batch.requests)
        ... the synchronous path consumes `source` as always ...
    summary = batch_summary(summary, chosen, settings, out_dir, batch.report)

In sync mode `batch_session` only refuses to start while batch jobs of the run are live
(their clips would be paid twice), and `tag` and `batch_summary` change nothing.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend
from agl.contracts.calls import Reply, Request
from agl.core.secrets import known_secrets, scrub_text
from agl.core.single_writer import exclusive
from agl.errors import AglError
from agl.inference.batch import state as state_mod
from agl.inference.batch.options import batch_options, is_batch
from agl.inference.batch.run import PassContext, PassReport, run_pass
from agl.inference.record import RunContext
from agl.inference.runner import RunOptions


@dataclass
class BatchSession:
    requests: list[Request]  # what the synchronous path sends (or answers from cache) now
    reasons: dict[str, str]
    report: PassReport | None

    async def tag(self, source: AsyncIterator[tuple[int, Reply]],
                  requests: list[Request]) -> AsyncIterator[tuple[int, Reply]]:
        """In batch mode, each synchronous reply says so (`answered_by: sync | cache`) and,
        after a batch failure, why (`batch_fallback`); both go into the record's meta."""
        if self.report is None:
            async for item in source:
                yield item
            return
        try:
            async for i, reply in source:
                sid = requests[i].sample_id
                extra = {"answered_by": "cache" if reply.extra.get("cached") else "sync"}
                if sid in self.reasons:
                    extra["batch_fallback"] = self.reasons[sid]
                yield i, replace(reply, extra={**reply.extra, **extra})
        finally:
            await source.aclose()


@contextlib.contextmanager
def batch_session(backend: Backend, requests: list[Request], *, run: RunContext, out_dir: Path,
                  cache: Any, options: RunOptions) -> Iterator[BatchSession]:
    """The runner's hook: in batch mode, one pass over the provider's jobs (collect, submit, fall
    back) under the folder's writer lock, yielding the requests left for the synchronous path;
    in sync mode, a guard that refuses while batch jobs are live."""
    if not is_batch(backend.settings):
        _refuse_sync_while_live(out_dir)
        yield BatchSession(requests, {}, None)
        return

    batch_opts = batch_options(backend.name, backend.settings)
    ctx = PassContext(backend=backend, out_dir=Path(out_dir), pred_path=Path(run.pred_path),
                      cache=cache, prompt=run.prompt, fingerprint=run.fingerprint,
                      price_in=run.spec.price_in_per_m, price_out=run.spec.price_out_per_m,
                      options=batch_opts, timeout_s=options.timeout_s,
                      concurrency=options.concurrency)
    # One process per run folder while jobs are submitted and clips fall back: a second
    # one would submit or request the same clips again.
    with exclusive(out_dir, "this run's batch jobs"):
        report = run_pass(ctx, requests)

        secrets = known_secrets(backend.settings)  # a provider's error may quote the key
        for line in report.messages:
            print(scrub_text(f"batch: {line}", secrets), file=sys.stderr)
        yield BatchSession(report.sync_now, report.reasons, report)


def _refuse_sync_while_live(out_dir: Path) -> None:
    state = state_mod.load(out_dir)
    if state is None or not state.jobs:
        return
    n = sum(len(j.clips) for j in state.jobs)
    raise AglError(f"{state_mod.state_path(out_dir)}: {len(state.jobs)} batch job(s) holding "
                   f"{n} clip(s) are live; a synchronous run would pay for them twice. Rerun "
                   "with --batch (settings.mode: batch) to collect them, or cancel them first "
                   "(agl infer ... --batch-cancel)")


def batch_summary(summary: dict[str, Any], chosen: list[Any], settings: dict[str, Any],
                  out_dir: Path, report: PassReport | None) -> dict[str, Any]:
    """The run summary's batch section: which clips the batch API answered, which the
    synchronous path (and why), which the cache; `batch_in_flight` (a timing, kept out of
    DVC's run_summary.json) says what is still out."""
    if not is_batch(settings):
        return summary
    options = batch_options(summary["backend"], settings)
    clips: dict[str, list[str]] = {"batch": [], "sync": [], "cache": []}
    reasons = {}
    for p in chosen:
        if p.status.value == "failed":
            continue
        clips.setdefault(p.meta.get("answered_by") or "sync", []).append(p.sample_id)
        if p.meta.get("batch_fallback"):
            reasons[p.sample_id] = p.meta["batch_fallback"]
    if report is not None:
        flight = {"jobs": report.in_flight_jobs, "clips": report.in_flight_clips,
                  "waiting": report.waiting, "submitted_jobs": report.submitted_jobs,
                  "collected": report.collected}
    else:
        state = state_mod.load(out_dir)
        jobs = [j for j in (state.jobs if state else [])
                if j.fingerprint == summary["run_fingerprint"]]
        flight = {"jobs": len(jobs), "clips": sum(len(j.clips) for j in jobs), "waiting": 0,
                  "submitted_jobs": 0, "collected": 0}
    return {**summary,
            "batch": {"price_factor": options.price_factor,
                      "answered_by": {k: len(v) for k, v in clips.items()},
                      "clips": {k: sorted(v) for k, v in clips.items()},
                      "fallback_reasons": dict(sorted(reasons.items()))},
            "batch_in_flight": flight}


def pending(summary: dict[str, Any]) -> int:
    """Clips a batch run has still out (in live jobs or waiting to be submitted)."""
    f = summary.get("batch_in_flight") or {}
    return int(f.get("clips", 0)) + int(f.get("waiting", 0))


def summary_text(summary: dict[str, Any]) -> str:
    """The batch part of `agl.inference.runspec.summary_line`, empty for a synchronous run."""
    b = summary.get("batch")
    if not b:
        return ""
    n = b["answered_by"]
    f = summary.get("batch_in_flight") or {}
    text = (f"\n  batch: {n.get('batch', 0)} clip(s) answered by batch (x{b['price_factor']:g} "
            f"price), {n.get('sync', 0)} synchronously ({len(b['fallback_reasons'])} after a "
            f"batch failure), {n.get('cache', 0)} from cache")
    if f.get("clips"):
        text += (f"; {f['clips']} clip(s) in {f['jobs']} live job(s): rerun the same command "
                 "later to collect them (a job takes up to 24 h)")
    if f.get("waiting"):
        text += f"; {f['waiting']} clip(s) wait to be submitted: rerun later"
    return text
