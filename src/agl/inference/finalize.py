"""The tracked files of an inference run, made canonical once the run is over.

During a run `predictions.jsonl` is an append-only log in arrival order (durable, resumable);
arrival order follows concurrency and network timing, and each record carries its latency,
attempts and whether it came from the cache. None of that is decided by data, params and
code, so at the end the run folder is rewritten as DVC should hash it:

* `predictions.jsonl`: one record per clip, in manifest order (clips outside the manifest
  after, by key), floats at `agl.core.canonical` precision, keys sorted, without the volatile
  meta fields below;
* `run_summary.json`: the run's counts, tokens, cost, prompt and settings, without timings,
  and, for a run whose replies named the model that answered, the served-model ledger's
  summary (`served_models`, `served_flags`; agl.predictions.served says why it may be tracked);
* `run_summary.timings.json` (ignored by DVC): the run's latency statistics, wall time,
  session request and cache counts, and each clip's volatile meta (kept across reruns).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agl.core import canonical, diskwrite
from agl.core.secrets import known_secrets, scrub
from agl.predictions.records import read_predictions
from agl.predictions.served import ledger, split

# The files of a run folder (`<out>/`): the predictions log and the run's summary.
PREDICTIONS = "predictions.jsonl"
SUMMARY = "run_summary.json"

# Per-clip meta that depends on the machine, the network or the run's history.
VOLATILE_META = (
    "latency_s",
    "attempts",
    "unsent_attempts",  # attempts whose request never left this machine (agl.inference.runner)
    "cached",
    "load_s",
    "prefill_s",
    "decode_s",
    "tokens_per_s",
    "submitted_at",
    "listened_s",
    "batch_job",
    "listen_s",  # birdrange / langprior: seconds spent listening (wall time)
    "invert_s",  # birdrange: seconds spent inverting the range grid (wall time)
    # What the provider says answered (agl.predictions.served): per clip, never tracked.
    "served_model",
    "system_fingerprint",
)
# run_summary.json keys of the same kind.
VOLATILE_SUMMARY = (
    "latency_s",
    "cached",
    "attempts",
    "local_prefill_s",
    "local_decode_s",
    "local_tokens_per_s",
    "wall_s",
    "session_requests",
    "session_cache_hits",
    "session_cost_usd",
    "batch_in_flight",
    "ray",  # the ray executor's nodes, shards, attempts and seconds (transport, not a result)
)
# The authors' verbatim fields stay verbatim.
QUANTITIES = {"original": canonical.EXACT}


def canonical_records(latest: Mapping[str, Any], order: Sequence[str]) -> tuple[str, dict]:
    """(predictions.jsonl text, {sample_id: volatile meta}) for the newest record per clip."""
    rank = {k: i for i, k in enumerate(order)}
    records = sorted(latest.values(), key=lambda p: (rank.get(p.sample_id, len(rank)), p.sample_id))
    lines, volatile = [], {}
    for p in records:
        d = p.to_json()
        meta = dict(d.get("meta") or {})
        moved = {k: meta.pop(k) for k in VOLATILE_META if k in meta}
        if moved:
            volatile[p.sample_id] = moved
        d["meta"] = meta
        lines.append(canonical.jsonl_line(d, quantities=QUANTITIES))
    return "".join(lines), volatile


def write_canonical_run(
    out_dir: Path, pred_path: Path, latest: Mapping[str, Any], order: Sequence[str], summary: Mapping[str, Any]
) -> dict[str, Any]:
    """Rewrite `pred_path` canonically (`latest`: the newest record per clip, in `order`),
    write the stable `run_summary.json` and move every volatile figure to its timings file;
    returns the run's served-model ledger (agl.predictions.served), split between the two."""
    out_dir = Path(out_dir)
    text, volatile = canonical_records(latest, order)
    diskwrite.write_text(pred_path, text)
    # No secret in a summary (it echoes settings, errors and served ids), whatever its source.
    known = known_secrets()
    stable, timings = canonical.split(scrub(dict(summary), known), VOLATILE_SUMMARY)
    # Clips answered in an earlier session keep the timings recorded then.
    old_path = canonical.timings_path(out_dir / SUMMARY)
    clips: dict[str, Any] = {}
    if old_path.exists():
        try:
            clips = dict(json.loads(old_path.read_text(encoding="utf-8")).get("clips") or {})
        except (json.JSONDecodeError, AttributeError):
            clips = {}
    clips.update(volatile)
    served = ledger(clips, sorted(latest), str(summary.get("model") or ""))
    # Who answered, summed up, is tracked (a replay from the cache reproduces it); the clip
    # count and the rotating fingerprints stay with the timings.
    shown, beside = split(served)
    canonical.write_json(out_dir / SUMMARY, {**stable, **scrub(shown, known)})
    # When the run (this session of it) ended: volatile, so here, never in the tracked
    # summary; `agl export eee` reads it as the run's timestamp (agl.interchange.eee_export).
    finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    canonical.write_timings(out_dir / SUMMARY, {**timings, **beside, "finished_at": finished, "clips": clips})
    return served


def read_run(out_dir: str | Path) -> dict[str, Any]:
    """A run's newest prediction per clip with each clip's volatile meta (latency, attempts,
    cached, ...) merged back from the timings file: what a reader of the live log saw."""
    out_dir = Path(out_dir)
    preds = read_predictions(out_dir / PREDICTIONS)
    path = canonical.timings_path(out_dir / SUMMARY)
    clips = json.loads(path.read_text(encoding="utf-8")).get("clips", {}) if path.exists() else {}
    return {k: p.with_meta(**clips.get(k, {})) for k, p in preds.items()}
