"""Headline metrics: the few numbers per run and per curation stage that DVC shows.

The full metrics files (every breakdown, CI and threshold) are plain outputs; `dvc metrics
show` and `dvc exp show` read only these small files, which live under `metrics/` and are
tracked in git, so an experiment's commit carries its values and a sweep of experiments
fits a terminal. Values are rounded per quantity (km to 3 decimals, shares to 6, USD to 6)
and carry no timings, so they change only when data, params or code do.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from agl.errors import AglError


def _r(value: Any, digits: int) -> float | None:
    """Rounded; None where there is no number (a field a run never attempts is NaN)."""
    if value is None or not math.isfinite(float(value)):
        return None
    return round(float(value), digits)


def run_headline(doc: dict[str, Any], protocol: str = "paper") -> dict[str, Any]:
    """From an evaluate stage's metrics.json: n, coverage (share of clips with a scored
    coordinate), mean and median km, the three accuracies, reject and failure rates, cost."""
    protocols = doc.get("protocols") or {}
    if protocol not in protocols:
        protocol = next(iter(sorted(protocols)), None)
        if protocol is None:
            raise AglError("metrics.json: no protocol scored; nothing to summarise")
    m = protocols[protocol]
    n = int(m["n"])
    return {
        "protocol": protocol,
        "n": n,
        "coverage": _r(m.get("n_distance_scored", 0) / n if n else None, 6),
        "mean_km": _r(m.get("distance_error_km"), 3),
        "median_km": _r(m.get("median_km"), 3),
        "city_acc": _r(m.get("city_acc"), 6),
        "country_acc": _r(m.get("country_acc"), 6),
        "continent_acc": _r(m.get("continent_acc"), 6),
        "reject_rate": _r(m.get("reject_rate"), 6),
        "failure_rate": _r(m.get("failure_rate"), 6),
        "cost_usd": _r(doc.get("cost_usd", 0.0), 6),
    }


def filter_headline(summary: dict[str, Any]) -> dict[str, Any]:
    return {"clips": summary["clips"], "passed": summary["passed"], "failed": summary["failed"]}


def tag_headline(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "clips": summary["clips"],
        "tagged": summary["tagged"],
        "speech_fraction": _r(summary.get("mean_speech_fraction"), 4),
    }


def localizability_headline(summary: dict[str, Any]) -> dict[str, Any]:
    """Counts of the selection, its speech share and the held-out rank correlation."""
    sel = summary["selection"]
    check = summary.get("check_holdout") or {}
    selected = int(sel["selected"])
    return {
        "clips": summary["clips"],
        "highly_localizable": sel["highly_localizable"],
        "selected": selected,
        "speech_share": _r(sel["selected_speech"] / selected if selected else None, 6),
        "holdout_rho": _r(check.get("spearman_rho"), 6),
    }


def write_headline(path: str | Path, values: dict[str, Any]) -> None:
    from agl.core import canonical

    canonical.write_json(path, values)  # sorted keys, valid JSON (no NaN), atomic
