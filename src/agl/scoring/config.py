"""Frozen run configs whose fields carry their rule (agl.core.checks): built from a params
section by `from_params`, checked on construction, so a bad knob is one line naming its key."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from agl.core.checks import MAX_RESAMPLES, check_names, check_param, check_params, check_resamples, param_rule
from agl.core.geo import EARTH_MAX_KM, GEOSCORE_SCALE_KM
from agl.errors import AglError
from agl.scoring.clusters import DEFAULT_UNIT, parse_unit
from agl.scoring.labels import Labelling, check_labels, check_land

# The one default bootstrap count (params.yaml sets its own per section).
BOOTSTRAP = 1000
# A run's headline intervals (`evaluate.metric_bootstrap`, `agl evaluate`): at 1,000 resamples
# the Monte-Carlo SD of Qwen2.5-Omni's site:25 bounds was 7-13 km (mean), 109 km (median's
# lower bound), 0.002-0.003 (country); at 10,000: 4-6 km, 58 km, 0.0004-0.001, so intervals
# print whole km and three decimals (docs/metrics.md#resamples). ~2 s more for 1,442 clips.
METRIC_BOOTSTRAP = 10_000


def knob(key: str, default: Any = MISSING) -> Any:
    """A config field that holds the params key `key`, checked by that key's rule in
    agl.core.checks.PARAMS: one table for the params check and the config."""
    if param_rule(key) is None:
        raise ValueError(f"{key}: no rule in agl.core.checks.PARAMS; add it there")
    return field(default=default, metadata={"param": key})


def internal(default: Any) -> Any:
    """A config field that is no params key (set by a caller, never read from params.yaml)."""
    return field(default=default, metadata={"internal": True})


def check_fields(config: Any, source: str = "params.yaml") -> None:
    """Refuse the first knob that breaks its key's rule, in the params check's own line."""
    for f in fields(config):
        if "param" in f.metadata:
            check_param(f.metadata["param"], getattr(config, f.name), source)


def known(section: dict[str, Any] | None, cls: type, where: str) -> dict[str, Any]:
    """The section's keys that `cls` has (internal fields are none of them); an unknown key
    is one line naming it."""
    section = dict(section or {})
    names = {f.name for f in fields(cls) if not f.metadata.get("internal")}
    unknown = sorted(set(section) - names)
    if unknown:
        raise AglError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    return section


@dataclass(frozen=True)
class EvaluateConfig:
    """params.yaml `evaluate:` (and `mlflow.experiment`): how one run is scored and logged."""

    protocols: tuple[str, ...] = ("paper", "strict")
    metric_bootstrap: int = knob("evaluate.metric_bootstrap", METRIC_BOOTSTRAP)  # resamples per 95% CI
    max_resamples: int = knob("evaluate.max_resamples", MAX_RESAMPLES)  # bound on every resample count
    seed: int = knob("evaluate.seed", 0)
    strict_refusal_km: float = knob("evaluate.strict_refusal_km", EARTH_MAX_KM)
    geoscore_km: float = knob("evaluate.geoscore_km", GEOSCORE_SCALE_KM)  # GeoScore 5000·exp(-d / this)
    influence_share: float = knob("evaluate.influence_share", 0.2)  # a cluster above this share is named
    resampling_unit: str = DEFAULT_UNIT  # what a CI resamples (agl.scoring.clusters)
    labels: str = "manifest"  # the true country: manifest | point (agl.scoring.labels)
    point_land: str | None = "i"  # GSHHS land a predicted point must be on (agl.scoring.places)
    point_coast_km: float = knob("evaluate.point_coast_km", 5.0)  # ... or this close to its nearest town
    track: bool = True  # log one MLflow run
    experiment: str | None = None
    # No intervals at all (the importer's record without them, a test of the point values):
    # a caller's option, never `metric_bootstrap: 0` in params.yaml, whose tables `dvc repro`
    # prints and which carry intervals (docs/metrics.md#resamples).
    intervals: bool = internal(True)

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "protocols", tuple(self.protocols))
        object.__setattr__(self, "metric_bootstrap", int(self.metric_bootstrap))
        object.__setattr__(self, "max_resamples", int(self.max_resamples))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "strict_refusal_km", float(self.strict_refusal_km))
        object.__setattr__(self, "point_coast_km", float(self.point_coast_km))
        object.__setattr__(self, "geoscore_km", float(self.geoscore_km))
        object.__setattr__(self, "influence_share", float(self.influence_share))
        object.__setattr__(self, "resampling_unit", parse_unit(self.resampling_unit, "evaluate.resampling_unit").name)
        check_labels(self.labels)
        check_land(self.point_land)
        if not self.protocols:
            raise AglError("evaluate.protocols is empty: nothing to score under; list paper and/or strict")

    @property
    def resamples(self) -> int:
        """Resamples per interval: `metric_bootstrap`, or 0 without intervals."""
        return self.metric_bootstrap if self.intervals else 0

    @property
    def labelling(self) -> Labelling:
        return Labelling(self.labels, self.point_land, self.point_coast_km)

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, mlflow: dict[str, Any] | None = None,
                    source: str = "params.yaml") -> EvaluateConfig:
        """From params.yaml `evaluate:` and `mlflow:` (its experiment name); a resample count
        past `evaluate.max_resamples` is one line naming it, before any work."""
        values = known(section, cls, f"{source} evaluate")
        check_params("evaluate", values, source)  # the one table (agl.core.checks.PARAMS)
        check_resamples({"evaluate.metric_bootstrap": (values.get("metric_bootstrap", METRIC_BOOTSTRAP), 1)},
                        values.get("max_resamples"), source)
        protocols = values.get("protocols", cls.protocols)
        check_names(protocols, f"{source} evaluate.protocols", "protocol names", "evaluate.protocols: [paper, strict]")
        values["protocols"] = tuple(protocols)
        return cls(**values, experiment=(mlflow or {}).get("experiment"))
