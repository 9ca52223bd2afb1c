"""Power of a paired comparison of two runs, with clips resampled by cluster (`agl power`).

From the paired differences of two existing runs on their common clips (A - B per clip, of
distance or of a 0/1 correctness), the standard error of the mean difference is taken from
a cluster bootstrap (whole clusters resampled, agl.scoring.clusters), so it carries the
dependence between the clips of a place. For a two-sided test at level `alpha` (the
cluster-robust z test: the mean difference over its standard error, which is what the
paired bootstrap interval excluding 0 amounts to), a true difference delta is detected with
probability

    power(delta, se) = Phi(|delta| / se - z) + Phi(-|delta| / se - z),  z = Phi^-1(1 - alpha/2)

The standard error shrinks as 1 / sqrt(G) with the number G of clusters (new clusters drawn
like the present ones, of the same mean size), so:

* the smallest difference detectable with `power` on this dataset: (z + Phi^-1(power)) x se;
* the clusters needed to detect delta: G x ((z + Phi^-1(power)) x se / delta)^2, and the clips
  needed: that many clusters times the mean cluster size.

The power curve is the normal approximation; `tests/test_power.py` checks by simulation that
the sample size it gives reaches the power it claims.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from agl.errors import AglError

ALPHA = 0.05
POWER = 0.8


_NORMAL = NormalDist()  # the standard normal (stdlib: scipy.stats takes seconds to import)


def _z(p: float) -> float:
    return _NORMAL.inv_cdf(p)


def detectable(se: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference a test at `alpha` detects with probability `power`."""
    return (_z(1 - alpha / 2) + _z(power)) * se if math.isfinite(se) else math.nan


def power_of(delta: float, se: float, *, alpha: float = ALPHA) -> float:
    """The probability that the two-sided test at `alpha` detects a true difference `delta`."""
    if not se > 0:
        return math.nan
    z = _z(1 - alpha / 2)
    return _NORMAL.cdf(abs(delta) / se - z) + _NORMAL.cdf(-abs(delta) / se - z)


def cluster_se(d: np.ndarray, labels: np.ndarray, *, n_boot: int = 2000, seed: int = 0) -> float:
    """Bootstrap standard error of mean(d), whole clusters (labels 0..G-1) resampled."""
    groups = int(labels.max()) + 1
    sums = np.bincount(labels, weights=d, minlength=groups)
    sizes = np.bincount(labels, minlength=groups).astype(float)
    rng = np.random.default_rng(seed)
    means = []
    for s in range(0, n_boot, 500):
        idx = rng.integers(0, groups, size=(min(500, n_boot - s), groups))
        means.append(sums[idx].sum(axis=1) / sizes[idx].sum(axis=1))
    return float(np.std(np.concatenate(means), ddof=1))


@dataclass(frozen=True)
class Power:
    """What two runs' paired differences say about the sample sizes a comparison needs."""

    metric: str
    n_clips: int
    n_clusters: int
    diff: float  # observed mean of A - B
    se: float  # its cluster-bootstrap standard error
    alpha: float
    power: float
    detectable: float  # smallest true difference detected with `power` on these clips
    target: float | None = None  # the difference asked about
    clusters_needed: int | None = None
    clips_needed: int | None = None
    power_now: float | None = None  # the power this dataset has for `target`


def power_analysis(d, labels, *, metric: str = "", target: float | None = None,
                   alpha: float = ALPHA, power: float = POWER, n_boot: int = 2000,
                   seed: int = 0) -> Power:
    """The detectable difference of these paired differences `d` (per clip, NaN = not
    scored by both) in clusters `labels`, and, for `target`, the clusters and clips needed."""
    if not (0 < alpha < 1 and 0 < power < 1):
        raise AglError(f"power: alpha and power must lie in (0, 1), got {alpha} and {power}")
    d = np.asarray(d, dtype=float)
    keep = np.isfinite(d)
    from agl.scoring.clusters import subset  # lazy: only `agl power` needs it

    labels = subset(np.asarray(labels), keep)
    d = d[keep]
    if d.size < 2 or int(labels.max()) < 1:
        raise AglError(f"power: {metric or 'the metric'} is scored by both runs on {d.size} clip(s) "
                       f"in {0 if d.size == 0 else int(labels.max()) + 1} cluster(s); it needs two "
                       "clusters at least")
    groups = int(labels.max()) + 1
    se = cluster_se(d, labels, n_boot=n_boot, seed=seed)
    out = {"metric": metric, "n_clips": int(d.size), "n_clusters": groups, "diff": float(d.mean()),
           "se": se, "alpha": alpha, "power": power,
           "detectable": detectable(se, alpha=alpha, power=power)}
    if target is not None:
        if not (math.isfinite(target) and target != 0):
            raise AglError(f"power: the difference to detect must be a non-zero number, got {target}")
        need = groups * (out["detectable"] / abs(target)) ** 2
        clusters = max(2, math.ceil(need))
        out.update(target=float(target), clusters_needed=clusters,
                   clips_needed=math.ceil(clusters * d.size / groups),
                   power_now=power_of(target, se, alpha=alpha))
    return Power(**out)

