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
from agl.errors import AglError

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
    # The country by the recording place, and the levels from the predicted point
    # (agl.scoring.labels; docs/metrics.md#labels-from-the-recording-place).
    "country_acc_point": ("Country accuracy, labels by the recording place (ISO 3166)", SHARE,
                          "n_country_acc_point", None),
    "country_point_acc": ("Same country by the predicted point", SHARE, "n_country_point_acc", None),
    "admin1_acc": ("Region (admin1) accuracy from the predicted point", SHARE, "n_admin1_acc", None),
    "admin2_acc": ("Sub-region (admin2) accuracy from the predicted point", SHARE, "n_admin2_acc", None),
    "city_point_acc": ("City accuracy from the predicted point (nearest GeoNames place)", SHARE,
                       "n_city_point_acc", None),
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
        # The unit the protocol's `ci95` was drawn with is the protocol's own
        # `resampling_unit` (agl.scoring.evaluate): a site:25 interval labelled `clip`
        # would pass for an i.i.d. one (issue 50).
        unit = res.get("resampling_unit") or pick.get("unit") or pick.get("resampling_unit") or DEFAULT_UNIT
        seed = pick.get("seed")
        return cls(str(pick.get("method") or DEFAULT_METHOD), float(pick.get("level") or 0.95),
                   int(pick.get("resamples") or pick.get("bootstrap") or 0),
                   None if seed is None else int(seed), str(unit))


CLIP_LOWER, CLIP_UPPER = "clip_ci95_lower", "clip_ci95_upper"


def method_of(method: str, unit: str) -> str:
    """The interval's method with the unit it resampled (`percentile bootstrap over site:25
    clusters`), so the unit travels with the interval itself, not only in details."""
    return method if unit == "clip" else f"{method} over {unit} clusters"


def _bounds(table: Any, metric: str) -> tuple[float, float] | None:
    pair = (table or {}).get(metric) if isinstance(table, dict) else None
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return None
    lo, hi = _number(pair[0]), _number(pair[1])
    return None if lo is None or hi is None else (lo, hi)


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
    bounds = _bounds(res.get("ci95"), metric)
    details = {"protocol": protocol, "resampling_unit": interval.unit, "n_clips": str(res.get("n"))}
    if bounds is not None and interval.resamples:
        uncertainty["confidence_interval"] = {
            "lower": bounds[0], "upper": bounds[1],
            "confidence_level": interval.level, "method": method_of(interval.method, interval.unit)}
        uncertainty["num_bootstrap_samples"] = interval.resamples
        # The clip interval beside a cluster one, under its own name: the schema holds one
        # interval, and details only strings (repr: a float read back is the same float).
        clip = _bounds(res.get("ci95_clip"), metric)
        if clip is not None and interval.unit != "clip":
            details[CLIP_LOWER], details[CLIP_UPPER] = repr(clip[0]), repr(clip[1])
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


def protocols_of(results: list[dict[str, Any]], where: str,
                 clips_in: int | None = None) -> dict[str, dict[str, Any]]:
    """metrics.json `protocols` from a record's evaluation results (import: the numbers as
    the record states them). Each interval must say how it was drawn; every number must be
    one the metric can take, and every count at most `clips_in` (the dataset's clips)."""
    out: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(results):
        metric_id = str(r["metric_config"].get("metric_id") or "")
        metric = metric_id.removeprefix(f"{BENCHMARK}.")
        protocol = (r["metric_config"].get("metric_parameters") or {}).get("protocol") or "paper"
        if metric not in METRICS:
            continue  # a metric this project does not rank: kept in the record, not on the board
        field = f"{where}: evaluation_results[{i}].score_details"
        res = out.setdefault(str(protocol), {"ci95": {}})
        res[metric] = _bounded(r["score_details"]["score"], metric, f"{field}.score")
        details = r["score_details"].get("details") or {}
        if details.get("resampling_unit"):
            res["resampling_unit"] = str(details["resampling_unit"])
        clip = _float_text(details.get(CLIP_LOWER)), _float_text(details.get(CLIP_UPPER))
        if clip[0] is not None and clip[1] is not None:
            at = f"{field}.details"
            lo, hi = _bounded(clip[0], metric, f"{at}.{CLIP_LOWER}"), _bounded(clip[1], metric, f"{at}.{CLIP_UPPER}")
            if lo > hi:
                raise AglError(f"{at}: {CLIP_LOWER} {lo:g} is above {CLIP_UPPER} {hi:g}; an interval "
                               "runs from its low end to its high end")
            res.setdefault("ci95_clip", {})[metric] = [lo, hi]
        unc = r["score_details"].get("uncertainty") or {}
        ci = unc.get("confidence_interval")
        if ci is not None:
            if not ci.get("method"):
                raise AglError(f"{field}.uncertainty.confidence_interval.method: required field "
                               "missing (an interval without its method cannot be compared)")
            at = f"{field}.uncertainty.confidence_interval"
            lo = _bounded(ci["lower"], metric, f"{at}.lower")
            hi = _bounded(ci["upper"], metric, f"{at}.upper")
            if lo > hi:
                raise AglError(f"{at}: lower {lo:g} is above upper {hi:g}; an interval runs from "
                               "its low end to its high end")
            res["ci95"][metric] = [lo, hi]
        n = unc.get("num_samples")
        if isinstance(n, int) and not isinstance(n, bool):
            res[METRICS[metric][2]] = _count(n, clips_in, f"{field}.uncertainty.num_samples")
            res["n"] = max(res.get("n", 0), n)
        clips = details.get("n_clips", "")
        if str(clips).isdigit():
            res["n"] = _count(int(clips), clips_in, f"{field}.details.n_clips")
    return out


def _bounded(value: Any, metric: str, field: str) -> float:
    """A stated number of `metric`, if it is one the metric can take (finite, within the
    metric's own range: 0 to half the Earth's circumference for a distance, 0 to 1 for a share
    or a rate); else one line naming the field. A record is outside input: a mean distance of
    -500 km would rank first, and 1e308 km or an accuracy of 7.5 is no run's."""
    lo, hi = METRICS[metric][1][3:5]
    number = _number(value)
    if number is None:
        raise AglError(f"{field}: {str(value)[:40]!r} is not a finite number")
    if not lo <= number <= hi:
        unit = METRICS[metric][1][0]
        raise AglError(f"{field}: {number:g} is outside what {METRICS[metric][0].lower()} can be "
                       f"({lo:g} to {hi:g} {unit}); no run has it")
    return number


def _count(n: int, clips_in: int | None, field: str) -> int:
    """A stated count of clips: 0 or more, and no more than the dataset holds."""
    if n < 0:
        raise AglError(f"{field}: {n} is not a count of clips (0 or more)")
    if clips_in is not None and n > clips_in:
        raise AglError(f"{field}: {n} clips, but the dataset has {clips_in}; a run covers at "
                       "most every clip once")
    return n


def _float_text(text: Any) -> float | None:
    try:
        return _number(float(str(text))) if text is not None else None
    except ValueError:
        return None
