"""Paired comparison of two runs on the clips both score: bootstrap interval and sign-flip
permutation p-value of the mean difference.

Lives in scoring/ (below counterfactual/ and report/) so both can use it without the
counterfactual stages depending on the report's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agl.scoring.power import detectable
from agl.scoring.wording import NOT_APPLICABLE, insufficient


@dataclass(frozen=True)
class PairedResult:
    """A - B on the clips both runs score, for one metric."""

    metric: str
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean over common clips of (a - b)
    ci_lo: float  # paired bootstrap 95% interval of diff
    ci_hi: float
    p_value: float  # two-sided sign-flip permutation test of "no difference"
    note: str = ""  # where no estimate is given: "—" (n = 0) or "insufficient data (...)"
    n_clusters: int = 0  # clusters the common clips fall in (= n under the clip unit)
    # the smallest true difference detected with 80% power at the 5% level on these clips
    # (agl.scoring.power.detectable of the bootstrap's standard error)
    detectable: float = math.nan


def paired_test(a, b, *, metric: str = "", n_boot: int = 2000, n_perm: int = 10000,
                seed: int = 0, min_n: int = 1, clusters=None) -> PairedResult:
    """Paired bootstrap CI and sign-flip permutation p-value of mean(a - b).

    Under the null of no difference each clip's pair is exchangeable, so flipping the sign
    of its difference at random gives the null distribution of the mean difference.
    `clusters` (per-pair labels, agl.scoring.clusters): the bootstrap resamples whole
    clusters and the signs flip per cluster (every pair of a cluster together: under the
    null a cluster's summed difference is symmetric, not each pair's); single-clip clusters
    (or none) are the clip test, the same draws.
    Fewer than `min_n` pairs, or clusters (the report's minimum support): no estimate, only
    n and a note (a paired CI over a handful of clips is too wide to mean anything and easy
    to misread)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = int(a.size)
    labels = np.arange(n) if clusters is None else _renumber(np.asarray(clusters)[keep])
    groups = int(labels.max()) + 1 if n else 0
    if n == 0 or min(n, groups) < min_n:
        nan = math.nan
        # n = 0: the metric is not scored on these clips (a coordinates-only baseline has no
        # country), which is not a matter of support: not applicable (agl.scoring.wording).
        note = (NOT_APPLICABLE if n == 0 else insufficient(n, min_n) if n < min_n
                else insufficient(groups, min_n, " clusters"))
        return PairedResult(metric, n, nan, nan, nan, nan, nan, nan, note, groups)
    d = a - b
    observed = float(d.mean())
    rng = np.random.default_rng(seed)
    sums = np.bincount(labels, weights=d, minlength=groups)
    sizes = np.bincount(labels, minlength=groups).astype(float)
    single = groups == n  # single clips: the clip test's own arithmetic, so the same numbers
    boots = []
    for s in range(0, n_boot, 500):
        idx = rng.integers(0, groups, size=(min(500, n_boot - s), groups))
        boots.append(d[idx].mean(axis=1) if single else sums[idx].sum(axis=1) / sizes[idx].sum(axis=1))
    boots = np.concatenate(boots)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    hits = 0
    tol = 1e-12 * max(1.0, abs(observed))
    for s in range(0, n_perm, 500):
        signs = rng.choice((-1.0, 1.0), size=(min(500, n_perm - s), groups))
        means = (signs * d).mean(axis=1) if single else signs @ sums / n
        hits += int((np.abs(means) >= abs(observed) - tol).sum())
    p = (hits + 1) / (n_perm + 1)
    return PairedResult(metric, n, float(a.mean()), float(b.mean()), observed,
                        float(lo), float(hi), float(p), "", groups,
                        detectable(float(np.std(boots, ddof=1)) if boots.size > 1 else math.nan))


def _renumber(labels: np.ndarray) -> np.ndarray:
    """Labels as 0..G-1 in order of first appearance (single clips: 0, 1, ..., as the rows)."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)]


def holm(p_values) -> np.ndarray:
    """Holm's (1979) step-down adjustment of a family of p-values (NaN: no test, left NaN and
    not counted in the family): sorted ascending, the i-th of m is multiplied by m - i + 1,
    made monotone and capped at 1. Controls the family-wise error rate at any dependence."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    live = np.flatnonzero(np.isfinite(p))
    m = live.size
    if m == 0:
        return out
    order = live[np.argsort(p[live], kind="stable")]
    scaled = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = scaled
    return out


def with_holm(frame, family: str):
    """A table of paired tests (a `p_value` column) with the Holm-adjusted p-values beside the
    raw ones (`p_holm`) and the family they are adjusted over named (`family`)."""
    if frame.empty or "p_value" not in frame:
        return frame
    return frame.assign(p_holm=holm(frame["p_value"].to_numpy(dtype=float)).round(6), family=family)
