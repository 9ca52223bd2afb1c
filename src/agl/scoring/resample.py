"""Cluster bootstrap draws of a mean or median (agl.scoring.metrics.cluster_ci uses them).

Each function takes per-row `values` (NaN = excluded), per-row cluster `labels` (0..G-1) and
returns `n` resampled statistics, resampling whole clusters with replacement. The three
routes mirror the row bootstrap's (agl.scoring.metrics): exact for 0/1 columns, cluster
indices for small tables, Poisson counts of quantile bins of clusters for large ones.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

BINS = 1024
MAX_PATTERNS = 4096  # beyond this many distinct count patterns, the generic route is cheaper


def cluster_sums(values: np.ndarray, labels: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: the sum of its finite values and how many there are."""
    finite = np.isfinite(values)
    sums = np.bincount(labels[finite], weights=values[finite], minlength=groups)
    counts = np.bincount(labels[finite], minlength=groups).astype(float)
    return sums, counts


def binary_draws(values: np.ndarray, labels: np.ndarray, groups: int, n: int, rng) -> np.ndarray | None:
    """The exact cluster bootstrap of a 0/1 mean: a cluster is its (ones, zeros, excluded)
    pattern, and a resample is a multinomial draw of G clusters over the patterns. The single
    clip patterns come first, in the row bootstrap's order, so single-clip clusters draw what
    the row bootstrap draws. None when there are too many patterns (the caller's generic route)."""
    finite = np.isfinite(values)
    ones = np.bincount(labels, weights=(values == 1), minlength=groups).astype(np.int64)
    zeros = np.bincount(labels, weights=(finite & (values == 0)), minlength=groups).astype(np.int64)
    nans = np.bincount(labels, weights=~finite, minlength=groups).astype(np.int64)
    single = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.int64)
    patterns, freq = np.unique(np.column_stack([ones, zeros, nans]), axis=0, return_counts=True)
    if len(patterns) > MAX_PATTERNS:
        return None
    extra = [i for i, p in enumerate(patterns) if p.sum() != 1]
    table = np.vstack([single, patterns[extra]])
    weights = np.concatenate([[freq[(patterns == s).all(axis=1)].sum() for s in single], freq[extra]])
    counts = rng.multinomial(groups, weights / groups, size=n)
    hit, miss = counts @ table[:, 0], counts @ table[:, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return hit / (hit + miss)


def index_draws(values: np.ndarray, labels: np.ndarray, groups: int, stat: str, n: int, rng) -> np.ndarray:
    """G cluster indices per resample (drawn as the row bootstrap draws rows); the mean from
    the drawn clusters' sums, the median as the median of every clip of the drawn clusters
    (each clip weighted by how often its cluster was drawn)."""
    sums, counts = cluster_sums(values, labels, groups)
    finite = np.isfinite(values)
    order = np.argsort(values[finite], kind="stable")
    sorted_values, sorted_labels = values[finite][order], labels[finite][order]
    chunk = max(1, 4_000_000 // max(len(values), 1))
    out = []
    for start in range(0, n, chunk):
        idx = rng.integers(0, groups, size=(min(chunk, n - start), groups))
        if stat == "mean":
            with np.errstate(invalid="ignore", divide="ignore"):
                out.append(sums[idx].sum(axis=1) / counts[idx].sum(axis=1))
            continue
        rows = idx.shape[0]
        drawn = np.bincount((idx + groups * np.arange(rows)[:, None]).ravel(),
                            minlength=rows * groups).reshape(rows, groups)
        out.append(weighted_median(sorted_values, drawn[:, sorted_labels]))
    return np.concatenate(out) if out else np.zeros(0)


def weighted_median(sorted_values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per row of integer `weights`, the median of `sorted_values` repeated that often (the
    mean of the two middle ones for an even total; NaN for none)."""
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1] if cum.shape[1] else np.zeros(len(weights))
    last = max(sorted_values.size - 1, 0)
    lo = np.minimum((cum <= ((total - 1) // 2)[:, None]).sum(axis=1), last)
    hi = np.minimum((cum <= (total // 2)[:, None]).sum(axis=1), last)
    if sorted_values.size == 0:
        return np.full(len(weights), np.nan)
    out = (sorted_values[lo] + sorted_values[hi]) / 2
    return np.where(total > 0, out, np.nan)


def bin_counts(groups: int, n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bins of `groups` sorted clusters (first position, size) and each resample's
    Poisson(size) draw of each bin over its size. An int `rng` is a seed: then the draw is
    kept (a few MB), because the bins depend on the number of clusters alone, so every
    metric of a table can share one draw (the 1,024 x n Poissons are most of the cost)."""
    if isinstance(rng, int):
        return shared_counts(groups, n, rng)
    edges = np.linspace(0, groups, min(BINS, groups) + 1).astype(int)
    starts = edges[:-1][np.diff(edges) > 0]
    size = np.diff(np.append(starts, groups)).astype(float)
    # float32: a Poisson count over its mean to 7 digits, far below the bootstrap's own
    # noise; half the memory every metric's product reads.
    return starts, size, (rng.poisson(size, size=(n, size.size)) / size).astype(np.float32)


@lru_cache(maxsize=4)
def shared_counts(groups: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    out = bin_counts(groups, n, np.random.default_rng(seed))
    for a in out:
        a.setflags(write=False)
    return out


def _ratio(drawn: np.ndarray, s: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per resample, the drawn bins' sum over their count (one pass over the draws)."""
    # einsum, not `@`: a (resamples x 1,024) by 2 product is too thin for BLAS, whose threads
    # cost more than the sums (10x, measured on a loaded machine).
    sums = [np.einsum("ij,j->i", drawn, x.astype(np.float32)).astype(float) for x in (s, c)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums[0] / sums[1]


def _pattern_bins(sums: np.ndarray, counts: np.ndarray, starts: np.ndarray,
                  groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per bin of clusters sorted by influence (as binned_draws), the sums of the clusters'
    hits and counts, for a 0/1 column: clusters with the same (hits, count) pattern are
    interchangeable, so the patterns (a few hundred) are sorted, not the clusters, and each
    bin takes its share of the patterns it spans."""
    hits, count = np.rint(sums).astype(np.int64), np.rint(counts).astype(np.int64)
    codes, freq = np.unique(hits * (int(count.max()) + 1) + count, return_counts=True)
    p_hits, p_count = codes // (int(count.max()) + 1), codes % (int(count.max()) + 1)
    mean = hits.sum() / count.sum() if count.sum() else 0.0
    order = np.argsort(p_hits - mean * p_count, kind="stable")
    p_hits, p_count, freq = p_hits[order], p_count[order], freq[order]
    at = np.concatenate([[0], np.cumsum(freq)])  # first position of each pattern
    edges = np.append(starts, groups)

    def cumulative(per: np.ndarray) -> np.ndarray:  # sum over the first `edges` clusters
        before = np.concatenate([[0], np.cumsum(per * freq)])
        t = np.minimum(np.searchsorted(at, edges, side="right") - 1, len(per) - 1)
        return before[t] + (edges - at[t]) * per[t]

    return np.diff(cumulative(p_hits.astype(float))), np.diff(cumulative(p_count.astype(float)))


def binned_draws(values: np.ndarray, labels: np.ndarray, groups: int, stat: str, n: int, rng) -> np.ndarray:
    """Large tables: clusters sorted into quantile bins by their influence on the statistic
    (mean: sum - mean x count, the cluster's term of the linearised ratio; median: clips at
    or below the median - count / 2); each resample draws Poisson(bin size) clusters of each
    bin, every drawn cluster standing for its bin's average (the Poisson bootstrap, as the
    row route bins rows). Sorting by influence, not by the cluster's mean, keeps a bin's
    clusters alike in what moves the statistic: a large cluster and a small one of the same
    mean move it by different amounts."""
    starts, size, drawn = bin_counts(groups, n, rng)
    finite = np.isfinite(values)
    if stat == "mean" and bool(((values == 0) | (values == 1) | ~finite).all()):
        # 0/1: hits and scored clips per cluster, without copying the rows
        hits = np.bincount(labels, weights=values == 1, minlength=groups)
        return _ratio(drawn, *_pattern_bins(hits, np.bincount(labels, weights=finite, minlength=groups),
                                            starts, groups))
    sums, counts = cluster_sums(values, labels, groups)
    total = counts.sum()
    if stat == "mean":
        key = sums - counts * (sums.sum() / total if total else 0.0)
    else:
        below = np.bincount(labels[finite], weights=values[finite] <= np.median(values[finite]),
                            minlength=groups)
        key = below - counts / 2
    order = np.argsort(key, kind="stable")
    if stat == "mean":
        return _ratio(drawn, np.add.reduceat(sums[order], starts), np.add.reduceat(counts[order], starts))
    # The median: each bin's clips as counts over 1,024 quantile bins of the clip values.
    finite = np.isfinite(values)
    vals, labs = values[finite], labels[finite]
    value_order = np.argsort(vals, kind="stable")
    vedges = np.linspace(0, vals.size, BINS + 1).astype(int)
    vstarts = vedges[:-1][np.diff(vedges) > 0]
    vbin = np.empty(vals.size, dtype=np.int64)
    vbin[value_order] = np.searchsorted(vstarts, np.arange(vals.size), side="right") - 1
    rep = np.add.reduceat(vals[value_order], vstarts) / np.diff(np.append(vstarts, vals.size))
    cbin = np.empty(groups, dtype=np.int64)
    cbin[order] = np.searchsorted(starts, np.arange(groups), side="right") - 1
    for band in (BAND, (0, rep.size)):
        got = _banded_median(drawn, cbin[labs], vbin, rep, band)
        if got is not None:
            return got
    raise AssertionError("the full band always holds the median")


BAND = (BINS * 2 // 5, BINS * 3 // 5)  # value bins 40%-60%: where a resampled median falls


def _banded_median(drawn: np.ndarray, cbin: np.ndarray, vbin: np.ndarray, rep: np.ndarray,
                   band: tuple[int, int]) -> np.ndarray | None:
    """Each resample's median from the value bins `band` (those below and above pooled in
    one bin each): the cumulative weights through the band are exact, so the median is too
    when it falls inside; None when a resample's falls outside (the caller widens)."""
    lo, hi = band
    inner = np.clip(vbin, lo - 1, hi) - (lo - 1)  # 0: below the band, hi - lo + 1: above
    width = hi - lo + 2
    table = np.bincount(cbin * width + inner, minlength=drawn.shape[1] * width)
    # float32: counts and Poisson ratios to 7 digits; half the memory traffic of the product.
    weights = drawn @ table.reshape(drawn.shape[1], width).astype(np.float32)
    cum = np.cumsum(weights, axis=1, dtype=float)
    half = cum[:, -1] / 2.0
    pos = (cum < half[:, None]).sum(axis=1)
    live = cum[:, -1] > 0
    if lo > 0 and (live & ((pos == 0) | (pos == width - 1))).any():
        return None
    values = rep[np.clip(pos + lo - 1, 0, rep.size - 1)]
    return np.where(live, values, np.nan)
