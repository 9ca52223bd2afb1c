"""Plain-text rendering of metrics for the terminal."""

from __future__ import annotations

import math
from typing import Any

from agl.scoring.labels import point_lines

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
    present. Under a cluster unit each metric shows the cluster interval, the clip interval
    beside it (for comparison), Kish's design effect (variance ratio) and the effective
    number of clips (n / deff); the clusters carrying most of a metric's variance are named."""
    speech = result.get("by_speech", {})
    unit = result.get("resampling_unit", "clip")
    clip = result.get("ci95_clip")
    head = f"{'metric':<28} {'all':>10} {'95% CI (' + unit + ')':>25}"
    if clip is not None:
        head += f" {'95% CI (clip)':>25} {'deff':>6} {'n eff':>7}"
    cols = [k for k in ("speech", "non_speech") if k in speech]
    head += "".join(f" {c:>11}" for c in cols)
    clusters = (f" in {result['n_clusters']} clusters ({unit}; Kish's effective number "
                f"{result['n_effective_clusters']:.1f})" if "n_effective_clusters" in result
                else f" in {result['n_clusters']} clusters ({unit})" if "n_clusters" in result else "")
    lines = [title, f"clips scored: {result['n']}{clusters}"
             + "".join(f", {c}: {speech[c]['n']}"
                       + (f" in {speech[c]['n_clusters']}" if "n_clusters" in speech[c] else "")
                       for c in cols)
             + (f" ({coverage_text(result['clips_predicted'], result['dataset_clips'])})"
                if "dataset_clips" in result else ""), _counts_line(result), head, "-" * len(head)]
    for key, label, pattern in ROWS:
        row = (f"{label:<28} {_value(result, key, pattern):>10} "
               f"{_interval(result['ci95'], key, pattern, result.get('n_clusters')):>25}")
        if clip is not None:
            deff = result.get("design_effect", {}).get(key)
            n_eff = result.get("n_effective", {}).get(key)
            row += (f" {_interval(clip, key, pattern):>25} {fmt(deff, '{:.2f}') if deff is not None else '':>6}"
                    f" {fmt(n_eff, '{:,.0f}') if n_eff is not None else '':>7}")
        row += "".join(f" {_value(speech[c], key, pattern):>11}" for c in cols)
        lines.append(row)
    for key, found in result.get("influential_clusters", {}).items():
        if found:
            label = dict((k, lab) for k, lab, _ in ROWS)[key]
            lines.append(f"note: {label}: " + "; ".join(
                f"{c['cluster']} ({c['clips']} clips) carries {c['share']:.0%} of its cluster variance"
                for c in found))
    notes = {k: v for k, v in result.get("notes", {}).items() if k != "protocol" and v}
    excluded = result.get("n_distance_excluded", 0)
    if excluded:
        lines.append(f"note: {excluded} clip(s) excluded from distance metrics by the protocol "
                     "(coordinate present but not a number, or latitude out of range)")
    for k, v in notes.items():
        lines.append(f"note: {k.replace('_', ' ')}: {v}")
    lines += point_lines(result)
    return "\n".join(line for line in lines if line is not None)


COUNTS = (("n_refused", "refused"), ("n_no_coordinates", "no coordinates"), ("n_rejected", "rejected"),
          ("n_truncated", "truncated"))


def count_text(res: dict[str, Any]) -> str:
    """The three counts (agl.scoring.metrics.counts), each under its one name:
    "refused 322, no coordinates 385, rejected 448"; "" for a result without them."""
    return ", ".join(f"{label} {res[key]}" for key, label in COUNTS if res.get(key) is not None)


def _counts_line(result: dict[str, Any]) -> str | None:
    if not count_text(result):
        return None
    km = "10,000 km" if result.get("notes", {}).get("protocol") == "paper" else "the refusal distance"
    return (f"clips refused {result['n_refused']} (the model declined), no coordinates "
            f"{result['n_no_coordinates']} (scored {km}), rejected {result['n_rejected']} "
            "(any field refused: the reject rate)"
            + (f", truncated {result['n_truncated']} (cut at the output limit; "
               + ("scored from what they hold" if km == "10,000 km" else "failures") + ")"
               if result.get("n_truncated") else ""))


def _value(res: dict[str, Any], key: str, pattern: str) -> str:
    """A metric's value; a median at the refusal distance reads "refused" (more than half
    the clips were scored at it: the median is no distance the model gave)."""
    if key == "median_km" and res.get("median_refused"):
        return "refused"
    return fmt(res.get(key), pattern)


# Interval bounds print the digits their Monte-Carlo noise supports at 10,000 resamples
# (agl.scoring.config.METRIC_BOOTSTRAP): whole km and GeoScore points, three decimals of a share.
BOUNDS = {"{:.2f}": "{:,.0f}", "{:.1f}": "{:.0f}", "{:.4f}": "{:.3f}"}


def _interval(ci: dict[str, Any], key: str, pattern: str, clusters: int | None = None) -> str:
    lo, hi = ci.get(key, (None, None))
    pattern = BOUNDS.get(pattern, pattern)
    if clusters == 1 and lo is not None and lo != lo:  # NaN: agl.scoring.metrics.cluster_ci
        return "none (one cluster)"
    return f"[{fmt(lo, pattern)}, {fmt(hi, pattern)}]"


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
                   f"continent {share(res['continent_acc'])}"
                   + (f", {count_text(res)}" if count_text(res) else ""))
    return out
