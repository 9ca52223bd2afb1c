"""Is a run's `predictions.jsonl` what its replies say? An edited output told apart from a
machine difference, where the reply cache can tell (`agl verify`).

A record of a deterministic model keeps the hash of the prompt and of the audio it was asked
with, so the address its reply was cached under (agl.inference.cache.record_key) can be
rebuilt from the record and its run's summary. Parsing that cached reply again gives the
answer the run recorded; a record whose place differs from it was edited after the run. A
record whose reply is not in the cache (a sampled reply, knn, a run without a cache) cannot
be checked, and is counted as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agl.core import canonical
from agl.inference.cache import ResponseCache, record_key
from agl.predictions.parse import parse_reply
from agl.predictions.records import PLACE_FIELDS, iter_records

SUMMARY = "run_summary.json"


@dataclass(frozen=True)
class Audit:
    checked: int  # records whose cached reply was found
    edited: tuple[str, ...]  # of those, the sample ids whose place no longer matches it
    unchecked: int  # records without a cached reply


def audit_run(pred_path: str | Path, cache_dir: str | Path) -> Audit | None:
    """The run's records against their cached replies; None when the run has no summary
    (not an inference run) or no cache is there."""
    pred_path, cache_dir = Path(pred_path), Path(cache_dir)
    summary_path = pred_path.with_name(SUMMARY)
    if not summary_path.exists() or not cache_dir.is_dir():
        return None
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    settings = dict(summary.get("settings") or {})
    cache = ResponseCache(cache_dir)
    checked, edited, unchecked = 0, [], 0
    for p in iter_records(pred_path):
        backend = str(p.meta.get("backend") or summary.get("backend") or "")
        model = str(p.meta.get("model") or summary.get("model") or "")
        reply = cache.get(record_key(backend, model, settings, p.sample_id, p.meta))
        if reply is None or p.raw_reply is None:
            unchecked += 1
            continue
        checked += 1
        again = parse_reply(p.sample_id, reply.text)
        if _place(again) != _place(p) or again.raw_reply != p.raw_reply:
            edited.append(p.sample_id)
    return Audit(checked, tuple(edited), unchecked)


def _place(p) -> str:
    """The place a record gives, as the tracked file writes it (coordinates rounded)."""
    return canonical.jsonl_line({f: getattr(p, f) for f in PLACE_FIELDS})


def audit_line(pred_path: str | Path, audit: Audit, stage: str) -> str | None:
    """One line for `agl verify` when records were edited, else None."""
    if not audit.edited:
        return None
    return (f"{pred_path}: {len(audit.edited)} of {audit.checked} record(s) checked no longer "
            f"match their cached replies (first: {audit.edited[0]}): edited after the run, not "
            f"a machine difference; `dvc repro -f {stage}` rebuilds the file from the cache")
