"""Headline metrics: the few numbers per run and per stage that `dvc exp show` lists.

The full metrics files (every breakdown, CI and threshold) are plain cached outputs; the DVC
metrics are only these small files under `metrics/`, tracked in git, so an experiment's
commit carries its values and a sweep of experiments fits a terminal. Only what a user
compares across experiments is here. Each file nests its values under one short name of
its own (`knn`, `filter`, `localize`, ...), so every flattened key (`knn.mean_km`,
`localize.selected`) is unique across files and `dvc exp show` heads its column with the
key alone, not with `metrics/runs/knn.json:mean_km`. Values are rounded per quantity (km to
3 decimals, shares to 6) and carry no timings or run history, so they change only when
data, params or code do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agl.core import canonical
from agl.errors import AglError


def _r(value: Any, digits: int) -> float | None:
    """Rounded; None where there is no number (a field a run never attempts is NaN)."""
    if value is None or not math.isfinite(float(value)):
        return None
    return round(float(value), digits)


# A run's headline: its name in metrics/runs/<run>.json, its key in metrics.json (and, after
# the protocol, in MLflow: `paper.distance_error_km`), its digits.
RUN_HEADLINE = (("mean_km", "distance_error_km", 3), ("median_km", "median_km", 3),
                ("city_acc", "city_acc", 6), ("country_acc", "country_acc", 6),
                ("continent_acc", "continent_acc", 6), ("failure_rate", "failure_rate", 6))


def run_headline(doc: dict[str, Any], name: str, protocol: str = "paper") -> dict[str, Any]:
    """From an evaluate stage's metrics.json, under the run's name: mean and median km, the
    three accuracies and the failure rate (a run whose clips failed is not comparable)."""
    protocols = doc.get("protocols") or {}
    if protocol not in protocols:
        protocol = next(iter(sorted(protocols)), None)
        if protocol is None:
            raise AglError("metrics.json: no protocol scored; nothing to summarise")
    m = protocols[protocol]
    return {name: {short: _r(m.get(key), digits) for short, key, digits in RUN_HEADLINE}}


# The leaderboard's rank of a run, logged to MLflow by the track stage (from
# build/leaderboard.csv) for a ranked run only: the runs table sorts by it, so MLflow orders runs
# as the leaderboard does and leaves an unranked run (more than leaderboard.max_refused of its
# clips refused) without one, listed last (MLflow sorts a missing metric last).
RANK_METRIC = "leaderboard_rank"


def run_metric_keys(protocols: Iterable[str]) -> list[str]:
    """The MLflow metrics of the headline under each protocol, in that order: the columns of
    the runs table agl's MLflow experiment opens on (agl.core.mlflow_view)."""
    return [f"{p}.{key}" for p in protocols for _, key, _ in RUN_HEADLINE]


def filter_headline(summary: dict[str, Any]) -> dict[str, Any]:
    return {"filter": {"clips": summary["clips"], "passed": summary["passed"]}}


def tag_headline(summary: dict[str, Any]) -> dict[str, Any]:
    return {"tag": {"tagged": summary["tagged"],
                    "speech_fraction": _r(summary.get("mean_speech_fraction"), 4)}}


def birds_headline(summary: dict[str, Any]) -> dict[str, Any]:
    return {"birds": {"listened": summary["listened"], "heard": summary["birds_heard"]}}


def speech_headline(summary: dict[str, Any]) -> dict[str, Any]:
    """Clips listened to, clips where speech was heard, and how many languages."""
    return {"speech": {"listened": summary["listened"], "heard": summary["speech_heard"],
                       "languages": len(summary.get("languages") or {})}}


def localizability_headline(summary: dict[str, Any]) -> dict[str, Any]:
    """The selection's size, its speech share and the held-out rank correlation."""
    sel = summary["selection"]
    check = summary.get("check_holdout") or {}
    selected = int(sel["selected"])
    return {"localize": {
        "selected": selected,
        "speech_share": _r(sel["selected_speech"] / selected if selected else None, 6),
        "holdout_rho": _r(check.get("spearman_rho"), 6),
    }}


def counterfactual_headline(summary: dict[str, Any]) -> dict[str, Any]:
    """Each intervention's effect on each model's mean km over all its paired clips
    (`delta_km.knn.truncate.seconds_3`; a single-level intervention's level is left out);
    None where the clips are too few for an estimate."""
    out: dict[str, float | None] = {}
    for key, row in summary.items():
        model, intervention, level, group = key.split("/")
        if group == "all":
            name = ".".join([model, intervention] + ([] if level == "default" else [level]))
            out[name] = _r(row.get("delta_km"), 3)
    return {"delta_km": out}


def write_headline(path: str | Path, values: dict[str, Any]) -> None:

    canonical.write_json(path, values)  # sorted keys, valid JSON (no NaN), atomic
