"""The cluster bootstrap's cost beside the clip bootstrap's, on a large synthetic score table.

Builds N predictions (default 200,000) over clusters whose sizes follow AGL1K's under the
default unit (site:25 on the published manifest: 1,444 clips in 441 clusters, so the
synthetic table keeps that clips-per-cluster mix, sizes drawn from the manifest's own when
../shared is present, else geometric with the same mean), then times every headline
interval (agl.scoring.metrics: the 16 metrics of `summarize`) resampled by clip and by
cluster, best of --repeats, and prints both and their ratio. The cluster labels are given
(computing them is a separate, one-off cost, printed as well for `site:25` on the table).

Usage: python benchmarks/cluster_bootstrap.py [--n 200000] [--bootstrap 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO.parent / "shared" / "data" / "agl1k" / "geoLocalization_schema.csv"


def cluster_sizes(rng: np.random.Generator) -> np.ndarray:
    """AGL1K's cluster sizes under site:25 (or a geometric stand-in with its mean)."""
    from agl.dataset.manifest_cache import load_manifest_cached
    from agl.scoring.clusters import cluster_labels

    if MANIFEST.exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            manifest = load_manifest_cached(MANIFEST, columns=[])
        return np.bincount(cluster_labels(manifest, "site:25"))
    return rng.geometric(441 / 1444, size=441)


def table(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray]:
    sizes = cluster_sizes(rng)
    drawn = rng.choice(sizes, size=n)  # more than enough clusters
    drawn = drawn[: np.searchsorted(np.cumsum(drawn), n) + 1]
    labels = np.repeat(np.arange(drawn.size), drawn)[:n]
    skill = rng.random(drawn.size)[labels]  # clips of a cluster share how well they are known
    distance = np.where(rng.random(n) < 0.1, np.nan, rng.exponential(3000 * (1.2 - skill)))
    frame = pd.DataFrame({
        "distance_km": distance,
        "city_correct": (rng.random(n) < 0.05 * skill).astype(float),
        "country_correct": (rng.random(n) < skill).astype(float),
        "continent_correct": np.where(rng.random(n) < 0.02, np.nan, rng.random(n) < 0.5 + skill / 2),
        "refused": rng.random(n) < 0.1, "failed": np.zeros(n, dtype=bool),
        "true_lat": rng.uniform(-60, 70, drawn.size)[labels], "true_lon": rng.uniform(-180, 180, drawn.size)[labels],
    })
    return frame, labels


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from agl.scoring.clusters import cluster_labels
    from agl.scoring.metrics import (
        intervals_later,  # what summarize runs
        metric_columns,
    )

    rng = np.random.default_rng(0)
    frame, labels = table(args.n, rng)
    columns = metric_columns(frame)

    def intervals(clusters):
        from agl.scoring import resample

        resample.shared_counts.cache_clear()  # each repeat pays for its draw
        return intervals_later(columns, args.bootstrap, 0, len(frame), clusters)()

    t_clip = best_of(args.repeats, lambda: intervals(None))
    t_cluster = best_of(args.repeats, lambda: intervals(labels))
    t_labels = best_of(1, lambda: cluster_labels(frame, "site:25"))
    clip, cluster = intervals(None), intervals(labels)
    print(f"{args.n:,} predictions in {labels.max() + 1:,} clusters, {len(columns)} metrics, "
          f"{args.bootstrap} resamples each (best of {args.repeats})")
    print(f"clip bootstrap:    {t_clip:.3f} s")
    print(f"cluster bootstrap: {t_cluster:.3f} s")
    print(f"ratio cluster / clip: {t_cluster / t_clip:.2f}")
    print(f"site:25 labels of the table (once per table): {t_labels:.3f} s")
    for k in ("distance_error_km", "median_km", "country_acc"):
        w = (cluster[k][1] - cluster[k][0]) / (clip[k][1] - clip[k][0])
        print(f"  {k}: clip {clip[k]}, cluster {cluster[k]}, design effect {w:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
