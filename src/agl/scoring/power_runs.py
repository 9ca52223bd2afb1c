"""`agl power` on two runs' files: score both, pair their clips, cluster them, and ask
agl.scoring.power. Apart from power.py so that the paired tests (which use its detectable
difference) do not load the scoring of files."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agl.core.checks import check_value
from agl.errors import AglError
from agl.scoring.power import ALPHA, POWER, Power, power_analysis, with_manifest

METRICS = ("distance_km", "country_correct", "continent_correct", "city_correct")


@dataclass(frozen=True)
class PowerConfig:
    """`agl power`'s question: which metric, under which protocol and unit, at what level."""

    metric: str = "distance_km"
    protocol: str = "paper"
    unit: str = "site:25"
    target: float | None = None  # in the metric's unit: km, or a share (0.05 = 5 points)
    alpha: float = ALPHA
    power: float = POWER
    n_boot: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise AglError(f"power: unknown metric '{self.metric}'; choose one of {', '.join(METRICS)}")
        check_value("--alpha", self.alpha, "agl power", rule="test_level")
        check_value("--power", self.power, "agl power", rule="power")


def power_files(a: str, b: str, manifest_path: str, config: PowerConfig) -> Power:
    """`power_analysis` of run A - run B (predictions files) on their common clips of the
    manifest, clusters under `config.unit` formed over those clips."""
    import warnings

    from agl.dataset.manifest_cache import load_manifest_cached  # lazy: only `agl power` needs it
    from agl.scoring.clusters import cluster_labels  # lazy: only `agl power` needs it
    from agl.scoring.evaluate import load_predictions_any, score_run  # lazy: only `agl power` needs it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a repaired manifest: evaluate says so
        manifest = load_manifest_cached(manifest_path, columns=[])
    scored = [score_run(manifest, load_predictions_any(p), config.protocol) for p in (a, b)]
    joined = scored[0].merge(scored[1][["sample_id", config.metric]], on="sample_id", suffixes=("", "_b"))
    if joined.empty:
        raise AglError(f"power: {a} and {b} score no clip in common")
    d = joined[config.metric].to_numpy(dtype=float) - joined[f"{config.metric}_b"].to_numpy(dtype=float)
    # The benchmark's own clusters (every clip of the manifest): the sizes a grown benchmark
    # built the same way would have, beside the pilot's.
    sizes = np.bincount(cluster_labels(manifest, config.unit)) if len(manifest) else None
    labels = cluster_labels(joined, config.unit)
    result = power_analysis(d, labels, metric=config.metric, target=config.target, alpha=config.alpha,
                            power=config.power, n_boot=config.n_boot, seed=config.seed)
    return result if sizes is None else with_manifest(result, labels[np.isfinite(d)], sizes)
