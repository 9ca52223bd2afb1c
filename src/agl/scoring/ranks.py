"""Ranks with uncertainty (docs/metrics.md#ranks): a rank read off point estimates says
nothing about how sure it is. The leaderboard's ranked full runs of one dataset are resampled
together: whole clusters of their common clips (the same draw for every run, so the runs'
shared difficulty cancels as in a paired comparison), each resample ranking the runs by mean
distance (equal means share the better rank: competition ranking, "1, 1, 3"). A run's rank
interval is the 2.5th to 97.5th percentile of its ranks; `rank_shares` is the share of
resamples in which it holds each rank.

Runs that cannot be told apart are grouped: the best-ranked run opens a group, which takes
every following run whose rank interval reaches the leader's worst rank; the first run left
out opens the next group. Subset runs are not ranked against full ones (their common clips
would be the subset's), and runs without per-clip scores (imported records) get no interval.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from agl.scoring.clusters import cluster_labels


def rank_draws(distances: np.ndarray, labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Per resample (rows) and run (columns), the run's rank (1 = smallest mean distance; equal
    means share the better rank) when whole clusters of the common clips are drawn with
    replacement, the same for every run.
    `distances`: clips x runs (NaN = not scored by that run: left out of its mean)."""
    # Runs with the same distance on every clip are resampled once and share that column's
    # ranks: their means are then equal by construction, not by the order a matrix product
    # happens to add columns in.
    key = np.where(np.isfinite(distances), distances, -1.0)
    first: dict[bytes, int] = {}
    same = [first.setdefault(key[:, k].tobytes(), k) for k in range(key.shape[1])]
    kept = sorted(first.values())
    column = np.array([kept.index(k) for k in same])  # each run's column among the kept
    distances = distances[:, kept]
    groups = int(labels.max()) + 1
    finite = np.isfinite(distances)
    sums = np.stack([np.bincount(labels, weights=np.where(finite[:, k], distances[:, k], 0.0), minlength=groups)
                     for k in range(distances.shape[1])], axis=1)
    counts = np.stack([np.bincount(labels, weights=finite[:, k].astype(float), minlength=groups)
                       for k in range(distances.shape[1])], axis=1)
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, n, 500):
        drawn = rng.integers(0, groups, size=(min(500, n - start), groups))
        weights = np.stack([np.bincount(row, minlength=groups) for row in drawn]).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = (weights @ sums) / (weights @ counts)
        means = np.where(np.isfinite(means), means, np.inf)[:, column]
        # competition ranking: 1 + the runs with a strictly smaller mean, so runs with equal
        # means (two runs of identical answers) share the better rank in every resample, as
        # the point ranking does ("1, 1, 3"), never an order by column
        out.append(1 + (means[:, None, :] < means[:, :, None]).sum(axis=2))
    return np.concatenate(out)


def rank_summary(ranks: np.ndarray) -> pd.DataFrame:
    """Per run (column of `ranks`): the 95% rank interval, the shares of each rank, and the
    group of runs it cannot be told apart from (1, 2, ... in the runs' order, which is the
    point ranking)."""
    lo = np.floor(np.percentile(ranks, 2.5, axis=0, method="lower")).astype(int)
    hi = np.ceil(np.percentile(ranks, 97.5, axis=0, method="higher")).astype(int)
    k = ranks.shape[1]
    shares = [{str(r): round(float(np.mean(ranks[:, j] == r)), 4) for r in range(1, k + 1)
               if np.any(ranks[:, j] == r)} for j in range(k)]
    group = np.zeros(k, dtype=int)
    current, leader_hi = 0, -1
    for j in range(k):
        if j == 0 or lo[j] > leader_hi:
            current += 1
            leader_hi = hi[j]
        group[j] = current
    return pd.DataFrame({"rank_lo": lo, "rank_hi": hi, "rank_group": group,
                         "rank_shares": [str(s) for s in shares]})


def rank_intervals(tables: list[pd.DataFrame], unit: str, *, n: int = 1000, seed: int = 0) -> pd.DataFrame:
    """`rank_summary` of runs given by their score tables (in the board's point order) on the
    clips all of them score, clusters formed under `unit` over those clips."""
    keys = set.intersection(*(set(t["sample_id"].astype(str)) for t in tables))
    common = sorted(keys)
    first = tables[0].assign(sample_id=tables[0]["sample_id"].astype(str)).set_index("sample_id").loc[common]
    labels = cluster_labels(first.reset_index(), unit)
    distances = np.column_stack([
        t.assign(sample_id=t["sample_id"].astype(str)).set_index("sample_id").loc[common, "distance_km"]
        .to_numpy(dtype=float) for t in tables])
    out = rank_summary(rank_draws(distances, labels, n, seed))
    out["rank_clips"] = len(common)
    return out
