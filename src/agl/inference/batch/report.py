"""What a batch run reports: the run summary's batch section (`batch_summary`, which the
`batch` executor adds), how many clips are still out (`pending`: the exit code 75), and the
batch part of the run's line (`summary_text`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agl.inference.batch import state as state_mod
from agl.inference.batch.context import PassReport
from agl.inference.batch.options import batch_options, is_batch


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
