"""A scored run as MLflow holds it: its metrics.json flattened into metrics, its ledger as tags.

agl.scoring.evaluate logs one MLflow run per scored run (`track_evaluated`); these are the
metrics and tags it logs beside the params.
"""

from __future__ import annotations

import re
from typing import Any

# A result's per-metric dicts (logged flat as <protocol>.<key>.<metric> or _lo/_hi).
PER_METRIC = ("ci95", "ci95_clip", "design_effect", "n_effective", "deft")


def run_metrics(doc: dict[str, Any], run_summary: dict[str, Any]) -> dict[str, Any]:
    """The flat MLflow metrics of a metrics.json document and the inference run's accounting."""
    metrics: dict[str, Any] = {}
    for protocol, res in doc["protocols"].items():
        for k, v in res.items():
            if k in (*PER_METRIC, "notes", "resampling_unit", "labels", "influential_clusters", "interval"):
                continue
            if k == "by_speech":
                for part, sub in v.items():
                    for kk, vv in sub.items():
                        if kk not in (*PER_METRIC, "influential_clusters"):
                            metrics[f"{protocol}.{part}.{kk}"] = vv
            elif k == "post_cutoff":  # the clips uploaded after the training cutoff
                for kk, vv in v.items():
                    if isinstance(vv, int | float) and not isinstance(vv, bool):
                        metrics[f"{protocol}.post_cutoff.{kk}"] = vv
            else:
                metrics[f"{protocol}.{k}"] = v
        for k, (lo, hi) in res["ci95"].items():
            metrics[f"{protocol}.ci95_lo.{k}"] = lo
            metrics[f"{protocol}.ci95_hi.{k}"] = hi
        for k, (lo, hi) in res.get("ci95_clip", {}).items():  # the clip unit's, for comparison
            metrics[f"{protocol}.ci95_clip_lo.{k}"] = lo
            metrics[f"{protocol}.ci95_clip_hi.{k}"] = hi
        for key in ("design_effect", "n_effective", "deft"):  # Kish's deff, n / deff, width ratio
            for k, v in res.get(key, {}).items():
                metrics[f"{protocol}.{key}.{k}"] = v
    # The inference run's accounting (run_summary.json): cost, tokens, latency, outcomes.
    for k, v in run_summary.items():
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in (
            "price_in_per_m", "price_out_per_m"
        ):
            metrics[f"run.{k}"] = v
        elif isinstance(v, dict) and k == "latency_s":
            metrics.update({f"run.latency_s.{q}": x for q, x in v.items()})
        elif isinstance(v, dict) and k == "served_models":  # the ledger: share per served id
            metrics.update({"run.served_share." + re.sub(r"[^\w./ -]", "_", m): x
                            for m, x in v.items()})
    return metrics


def served_tags(run_summary: dict[str, Any]) -> dict[str, str]:
    """The served-model ledger as MLflow tags (from the run's timings: volatile, so a tag
    beside the run, never a tracked file): shares, and the flags a reader must see."""
    tags = {}
    if run_summary.get("served_models"):
        tags["served_models"] = ", ".join(f"{m}={x:g}" for m, x in run_summary["served_models"].items())
    if run_summary.get("served_flags"):
        tags["served_flags"] = "; ".join(run_summary["served_flags"])
    return tags
