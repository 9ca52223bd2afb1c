"""Plain-text rendering of metrics for the terminal."""

from __future__ import annotations

import math
from typing import Any

ROWS = (
    ("distance_error_km", "mean distance error (km)", "{:.2f}"),
    ("median_km", "median distance error (km)", "{:.2f}"),
    ("geoscore", "GeoScore", "{:.1f}"),
    ("continent_acc", "continent accuracy", "{:.4f}"),
    ("country_acc", "country accuracy", "{:.4f}"),
    ("city_acc", "city accuracy", "{:.4f}"),
    ("reject_rate", "reject rate", "{:.4f}"),
    ("failure_rate", "failure rate", "{:.4f}"),
    *((f"within_{t}km", f"within {t} km", "{:.4f}") for t in (1, 10, 25, 100, 200, 750, 1000, 2500)),
)


def fmt(value: Any, pattern: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return pattern.format(value)


def metrics_table(result: dict[str, Any], title: str = "") -> str:
    """One run's metrics as a plain-text table for the terminal, with the speech split where
    present."""
    speech = result.get("by_speech", {})
    head = f"{'metric':<28} {'all':>10} {'95% CI':>23}"
    cols = [k for k in ("speech", "non_speech") if k in speech]
    head += "".join(f" {c:>11}" for c in cols)
    lines = [title, f"clips scored: {result['n']}"
             + "".join(f", {c}: {speech[c]['n']}" for c in cols)
             + (f" ({coverage_text(result['clips_predicted'], result['dataset_clips'])})"
                if "dataset_clips" in result else ""), head, "-" * len(head)]
    for key, label, pattern in ROWS:
        lo, hi = result["ci95"].get(key, (None, None))
        ci = f"[{fmt(lo, pattern)}, {fmt(hi, pattern)}]"
        row = f"{label:<28} {fmt(result.get(key), pattern):>10} {ci:>23}"
        row += "".join(f" {fmt(speech[c].get(key), pattern):>11}" for c in cols)
        lines.append(row)
    notes = {k: v for k, v in result.get("notes", {}).items() if k != "protocol" and v}
    excluded = result.get("n_distance_excluded", 0)
    if excluded:
        lines.append(f"note: {excluded} clip(s) excluded from distance metrics by the protocol "
                     "(coordinate present but not a number, or latitude out of range)")
    for k, v in notes.items():
        lines.append(f"note: {k.replace('_', ' ')}: {v}")
    return "\n".join(line for line in lines if line is not None)


def coverage_text(predicted: int, clips: int) -> str:
    """n / N in words: how much of the dataset a score stands on."""
    share = predicted / clips if clips else 0.0
    return f"predictions for {predicted} of {clips} clips of the manifest, {share:.1%}"


def share(x: float | None) -> str:
    """A field the run never attempts is not applicable ("n/a"), not "nan"."""
    return "n/a" if x is None or x != x else f"{x:.3f}"


def run_lines(doc: dict[str, Any]) -> list[str]:
    """The evaluate stage's line per protocol of a run's metrics.json: clips scored, the
    coverage (clips predicted / the dataset's clips) and the headline numbers."""
    out = []
    for protocol, res in doc["protocols"].items():
        out.append(f"{doc['run']} [{protocol}]: n={res['n']} "
                   f"({doc['clips_predicted']}/{doc['dataset_clips']} clips predicted), "
                   f"mean {res['distance_error_km']:.1f} km, country {share(res['country_acc'])}, "
                   f"continent {share(res['continent_acc'])}")
    return out
