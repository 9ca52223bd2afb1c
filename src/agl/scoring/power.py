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

An accuracy is different: the variance of a paired 0/1 difference depends on the gap itself
(psi - delta^2, psi the share of discordant clips), so the variance at the *observed* gap
undersizes a comparison whose target gap is smaller (a documented 749 clips reached ~71%
power). For 0/1 differences the clips are sized by Connor's (1987) formula for McNemar's test,

    n = (z sqrt(psi) + Phi^-1(power) sqrt(psi - delta^2))^2 / delta^2,

the null variance psi and the alternative's psi - delta^2 at the target gap, psi held at the
pilot's discordant share, times the pilot's design effect (Kish's deff: the cluster-bootstrap
variance of the mean difference over the independent-clips variance; 1 under the clip unit).

Clips needed are given twice, each with its assumption: for new clusters of the pilot's sizes
(the pilot's deff), and for clusters of the manifest's sizes, the way the benchmark was built:
Kish's deff = 1 + (m_w - 1) rho with m_w the size-weighted mean cluster size (sum m^2 / sum m)
of the manifest's clusters and the intra-cluster correlation rho = (deff - 1) / (m_w - 1)
taken from the pilot (clamped to [0, 1]).

`tests/test_power.py` checks both by simulation: the sample size given reaches the power
claimed (2,000 simulated comparisons for an accuracy whose observed gap exceeds the target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
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
    deff: float  # Kish's design effect of the pilot: se^2 over the independent-clips variance
    method: str  # "connor" (0/1 differences: variance at the target gap) | "normal"
    discordant: float | None = None  # 0/1: the share of clips where A and B differ (psi)
    target: float | None = None  # the difference asked about
    clips_needed_independent: int | None = None  # independent clips (deff 1)
    clusters_needed: int | None = None  # new clusters like the pilot's
    clips_needed: int | None = None  # ... and their clips (the pilot's deff)
    power_now: float | None = None  # the power this dataset has for `target`
    icc: float | None = None  # intra-cluster correlation from the pilot's deff and sizes
    manifest_clusters: int | None = None  # the manifest's clusters under the unit
    manifest_weighted_size: float | None = None  # sum m^2 / sum m over them
    manifest_deff: float | None = None  # Kish's deff for clusters of the manifest's sizes
    clips_needed_manifest: int | None = None
    clusters_needed_manifest: int | None = None


# Beyond this many clips a "needed" count means no benchmark of this kind would do.
MAX_CLIPS = 10**12


def connor_n(psi: float, delta: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """Connor (1987): independent pairs a two-sided McNemar test at `alpha` needs to detect a
    paired 0/1 difference `delta` with probability `power`, discordant share `psi`."""
    rest = psi - delta * delta
    if not (delta != 0 and rest > 0):
        return math.nan
    num = _z(1 - alpha / 2) * math.sqrt(psi) + _z(power) * math.sqrt(rest)
    return num * num / (delta * delta)


def connor_power(psi: float, delta: float, n: float, *, alpha: float = ALPHA) -> float:
    """The power of that test with `n` independent pairs (n = clips / deff)."""
    rest = psi - delta * delta
    if not (rest > 0 and n > 0):
        return math.nan
    z = _z(1 - alpha / 2)
    root = math.sqrt(rest)
    return (_NORMAL.cdf((abs(delta) * math.sqrt(n) - z * math.sqrt(psi)) / root)
            + _NORMAL.cdf((-abs(delta) * math.sqrt(n) - z * math.sqrt(psi)) / root))


def connor_detectable(psi: float, n: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest 0/1 difference `n` independent pairs detect (Connor's n solved for delta:
    it falls as delta grows, up to delta = psi, every discordant pair one way)."""
    if not (psi > 0 and n > 0) or connor_n(psi, psi, alpha=alpha, power=power) > n:
        return math.nan
    lo, hi = 0.0, psi
    for _ in range(200):
        mid = (lo + hi) / 2
        if connor_n(psi, mid, alpha=alpha, power=power) > n:
            lo = mid
        else:
            hi = mid
    return hi


def weighted_size(sizes: np.ndarray) -> float:
    """Kish's size-weighted mean cluster size, sum m^2 / sum m (the m of deff = 1 + (m - 1) rho)."""
    sizes = np.asarray(sizes, dtype=float)
    return float((sizes ** 2).sum() / sizes.sum())


def _needed(count: float, what: str) -> int:
    if not (math.isfinite(count) and count <= MAX_CLIPS):
        raise AglError(f"power: {what} needs more than {MAX_CLIPS:.0e} clips: no benchmark of "
                       "this kind detects it; ask about a larger difference")
    return max(2, math.ceil(count))


def power_analysis(d, labels, *, metric: str = "", target: float | None = None,
                   alpha: float = ALPHA, power: float = POWER, n_boot: int = 2000,
                   seed: int = 0) -> Power:
    """The detectable difference of these paired differences `d` (per clip, NaN = not
    scored by both) in clusters `labels`, and, for `target`, the clips and clusters needed.
    Differences all in {-1, 0, 1} (an accuracy) are sized by Connor's formula."""
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
    if not d.any():
        raise AglError(f"power: A and B score the same {metric or 'value'} on every one of their "
                       f"{d.size} common clips (the same run?): no difference exists to detect, "
                       "and there is no variance to size a comparison from")
    groups = int(labels.max()) + 1
    binary = bool(np.isin(d, (-1.0, 0.0, 1.0)).all()) and metric != "distance_km"
    se = cluster_se(d, labels, n_boot=n_boot, seed=seed)
    psi = float(np.mean(d != 0)) if binary else None
    srs_var = psi - float(d.mean()) ** 2 if binary else float(np.var(d, ddof=1))
    # Kish's deff of the pilot; the clip unit is independent clips by definition (a bootstrap
    # of single clips would only add its Monte-Carlo noise to 1).
    deff = 1.0 if groups == d.size else (se * se * d.size / srs_var if srs_var > 0 else math.nan)
    if binary:
        found = connor_detectable(psi, d.size / deff, alpha=alpha, power=power)
    else:
        found = detectable(se, alpha=alpha, power=power)
    out = {"metric": metric, "n_clips": int(d.size), "n_clusters": groups, "diff": float(d.mean()),
           "se": se, "alpha": alpha, "power": power, "detectable": found, "deff": deff,
           "method": "connor" if binary else "normal", "discordant": psi}
    if target is None:
        return Power(**out)
    if not (math.isfinite(target) and target != 0):
        raise AglError(f"power: the difference to detect must be a non-zero number, got {target}")
    shown = f"{abs(target) * 100:g} points" if binary else f"{abs(target):g} km"
    if binary:
        if abs(target) >= psi:
            raise AglError(f"power: A and B disagree on {psi:.1%} of their common clips; a gap of "
                           f"{shown} needs more disagreement than that (every discordant clip one "
                           "way gives a gap of at most the discordant share): ask about a smaller gap")
        independent = connor_n(psi, target, alpha=alpha, power=power)
        clips = _needed(independent * deff, f"a gap of {shown}")
        clusters = max(2, math.ceil(clips * groups / d.size))
        now = connor_power(psi, target, d.size / deff, alpha=alpha)
    else:
        independent = (_z(1 - alpha / 2) + _z(power)) ** 2 * srs_var / (target * target)
        clusters = _needed(groups * (out["detectable"] / abs(target)) ** 2, f"a difference of {shown}")
        clips = _needed(clusters * d.size / groups, f"a difference of {shown}")
        now = power_of(target, se, alpha=alpha)
    out.update(target=float(target), clips_needed_independent=_needed(independent, shown),
               clusters_needed=clusters, clips_needed=clips, power_now=now)
    return Power(**out)


def with_manifest(result: Power, labels, manifest_sizes) -> Power:
    """`result` (for a target) with the clips needed by clusters of the manifest's sizes
    (`manifest_sizes`: its clusters' clip counts under the same unit): Kish's deff
    1 + (m_w - 1) rho, rho from the pilot's deff and its clusters `labels` (of the clips
    scored by both). Unchanged without a target, or under the clip unit (nothing to carry)."""
    sizes = np.asarray(manifest_sizes, dtype=float)
    if result.target is None or sizes.size == 0 or result.n_clusters >= result.n_clips:
        return result
    from agl.scoring.clusters import subset  # lazy: only `agl power` needs it

    pilot_m = weighted_size(np.bincount(subset(np.asarray(labels), slice(None))))
    deff = result.deff
    rho = min(1.0, max(0.0, (deff - 1) / (pilot_m - 1))) if math.isfinite(deff) and pilot_m > 1 else math.nan
    m_w = weighted_size(sizes)
    man_deff = 1 + (m_w - 1) * rho
    clips = _needed(result.clips_needed_independent * man_deff, "this difference")
    return replace(result, icc=rho, manifest_clusters=int(sizes.size), manifest_weighted_size=m_w,
                   manifest_deff=man_deff, clips_needed_manifest=clips,
                   clusters_needed_manifest=max(2, math.ceil(clips / sizes.mean())))
