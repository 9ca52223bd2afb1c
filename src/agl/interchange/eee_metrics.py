"""The headline metrics as EEE evaluation results (one per protocol and metric), and back.

An evaluation_result_id is `<protocol>.<metric>` (`paper.distance_error_km`); its metric_id is
namespaced `agl1k.<metric>`, with the protocol in metric_parameters, so a reader joins the
same metric across records and never mixes the two protocols.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agl.core.geo import EARTH_MAX_KM

BENCHMARK = "agl1k"
DISTANCE = ("km", "mean_distance", True, 0.0, EARTH_MAX_KM)
SHARE = ("proportion", "accuracy", False, 0.0, 1.0)
RATE = ("proportion", "rate", True, 0.0, 1.0)
# metric -> (display name, (unit, kind, lower is better, min, max), the count it is over,
# the score table's per-clip column behind it (instance rows), or None).
METRICS: dict[str, tuple[str, tuple, str, str | None]] = {
    "distance_error_km": ("Mean distance error (km)", DISTANCE, "n_distance_scored", "distance_km"),
    "median_km": ("Median distance error (km)", (*DISTANCE[:1], "median_distance", *DISTANCE[2:]),
                  "n_distance_scored", None),
    "geoscore": ("GeoScore", ("points", "geoscore", False, 0.0, 5000.0), "n_distance_scored", None),
    "continent_acc": ("Continent accuracy", SHARE, "n_continent_scored", "continent_correct"),
    "country_acc": ("Country accuracy", SHARE, "n_country_scored", "country_correct"),
    "city_acc": ("City accuracy", SHARE, "n_city_scored", "city_correct"),
    "reject_rate": ("Refusal rate", RATE, "n", None),
    "failure_rate": ("Failure rate", RATE, "n", None),
    **{f"within_{t}km": (f"Share within {t} km", SHARE, "n_distance_scored", None)
       for t in (25, 200, 750, 2500)},
}
DEFAULT_METHOD = "percentile bootstrap"
DEFAULT_UNIT = "clip"


@dataclass(frozen=True)
class Interval:
    """How a run's 95% intervals were drawn: read from its metrics.json where it says
    (`interval`: method, level, resamples, seed, unit), else the evaluate params'."""

    method: str
    level: float
    resamples: int
    seed: int | None
    unit: str

    @classmethod
    def of(cls, res: dict[str, Any], doc: dict[str, Any], fallback: dict[str, Any]) -> Interval:
        given = res.get("interval") or doc.get("interval") or {}
        pick = {**fallback, **{k: v for k, v in given.items() if v is not None}}
        unit = pick.get("unit") or pick.get("resampling_unit") or DEFAULT_UNIT
        seed = pick.get("seed")
        return cls(str(pick.get("method") or DEFAULT_METHOD), float(pick.get("level") or 0.95),
                   int(pick.get("resamples") or pick.get("bootstrap") or 0),
                   None if seed is None else int(seed), str(unit))


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def result(protocol: str, metric: str, res: dict[str, Any], source_data: dict[str, Any],
           interval: Interval) -> dict[str, Any] | None:
    """One EEE evaluation result, or None where the run has no value for the metric (a
    coordinates-only baseline has no city accuracy): nothing is written as a number it is not."""
    score = _number(res.get(metric))
    if score is None:
        return None
    name, (unit, kind, lower, lo, hi), count, _ = METRICS[metric]
    n = res.get(count, res.get("n"))
    uncertainty: dict[str, Any] = {}
    if isinstance(n, int):
        uncertainty["num_samples"] = n
    bounds = (res.get("ci95") or {}).get(metric) or (None, None)
    if _number(bounds[0]) is not None and _number(bounds[1]) is not None and interval.resamples:
        uncertainty["confidence_interval"] = {
            "lower": float(bounds[0]), "upper": float(bounds[1]),
            "confidence_level": interval.level, "method": interval.method}
        uncertainty["num_bootstrap_samples"] = interval.resamples
    details = {"protocol": protocol, "resampling_unit": interval.unit, "n_clips": str(res.get("n"))}
    if interval.seed is not None:
        details["bootstrap_seed"] = str(interval.seed)
    return {
        "evaluation_result_id": f"{protocol}.{metric}",
        "evaluation_name": f"{BENCHMARK}/{protocol}/{metric}",
        "source_data": source_data,
        "metric_config": {
            "evaluation_description": f"{name}, {protocol} protocol (docs/metrics.md)",
            "metric_id": f"{BENCHMARK}.{metric}", "metric_name": name, "metric_kind": kind,
            "metric_unit": unit, "metric_parameters": {"protocol": protocol},
            "lower_is_better": lower, "score_type": "continuous", "min_score": lo, "max_score": hi,
        },
        "score_details": {"score": score, "details": details, "uncertainty": uncertainty},
    }


def protocols_of(results: list[dict[str, Any]], where: str) -> dict[str, dict[str, Any]]:
    """metrics.json `protocols` from a record's evaluation results (import: the numbers as
    the record states them). Each interval must say how it was drawn."""
    from agl.errors import AglError  # lazy: only a bad record needs it

    out: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(results):
        metric_id = str(r["metric_config"].get("metric_id") or "")
        metric = metric_id.removeprefix(f"{BENCHMARK}.")
        protocol = (r["metric_config"].get("metric_parameters") or {}).get("protocol") or "paper"
        if metric not in METRICS:
            continue  # a metric this project does not rank: kept in the record, not on the board
        res = out.setdefault(str(protocol), {"ci95": {}})
        res[metric] = r["score_details"]["score"]
        unc = r["score_details"].get("uncertainty") or {}
        ci = unc.get("confidence_interval")
        if ci is not None:
            if not ci.get("method"):
                raise AglError(f"{where}: evaluation_results[{i}].score_details.uncertainty."
                               "confidence_interval.method: required field missing (an interval "
                               "without its method cannot be compared)")
            res["ci95"][metric] = [ci["lower"], ci["upper"]]
        n = unc.get("num_samples")
        if isinstance(n, int):
            res[METRICS[metric][2]] = n
            res["n"] = max(res.get("n", 0), n)
        clips = (r["score_details"].get("details") or {}).get("n_clips", "")
        if str(clips).isdigit():
            res["n"] = int(clips)
    return out
