"""Headline metrics over a per-clip score table, each with a seeded 95% bootstrap interval.

A score table (built by `agl.scoring.protocols`) has one row per scored clip and the columns
`distance_km` (NaN = excluded by the protocol), `city_correct` / `country_correct` /
`continent_correct` (1, 0, or NaN = excluded), `refused` and `failed` (bool), `status`, and
`pred_lat` / `pred_lon` (NaN where the protocol found no usable coordinate).
Every metric is the mean (or median) of one such column over its non-NaN rows.

Three counts, each with one name everywhere it is printed (docs/metrics.md#three-counts):
`n_refused` (the model declined: the record's status is `refused`), `n_no_coordinates` (no
usable latitude/longitude: scored at the protocol's fixed distance, 10,000 km under the
paper's rule) and `n_rejected` (any predicted field refused: `reject_rate` times n).

Bootstrap: rows are resampled with replacement (B resamples, seeded). For 0/1 columns the
resampled counts of (correct, wrong, excluded) are drawn from their exact multinomial, which
is the bootstrap distribution itself, at O(B) cost. For continuous columns with more than
`EXACT_LIMIT` rows the values are grouped into 1,024 quantile bins whose resampled counts
are drawn as independent Poissons (the Poisson bootstrap, the standard large-n form of the
multinomial resample); each bin holds ~0.1% of the rows, so the interval differs from the
row-level bootstrap by far less than its own Monte-Carlo noise, at a cost independent of n
(tests check the two agree).

Clusters (docs/metrics.md#clusters): with cluster labels (agl.scoring.clusters) whole
clusters are resampled instead of rows, by the same three routes: the exact multinomial of
the clusters' (correct, wrong, excluded) count patterns for 0/1 columns; for a small table,
cluster indices drawn as the row bootstrap draws rows, each resample's statistic computed
from the drawn clusters' sums (mean) or as a weighted median; for a large one, clusters
sorted by their influence into 1,024 quantile bins whose counts are drawn as Poissons
(agl.scoring.resample). Clusters of single clips draw what the row bootstrap draws, from
the same seed.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from agl.core.geo import GEOSCORE_SCALE_KM, geoscore, usable_cpus
from agl.scoring import design, resample

THRESHOLDS_KM: tuple[int, ...] = (1, 10, 25, 100, 200, 750, 1000, 2500)
EXACT_LIMIT = 50_000
_BINS = 1024
HEADLINE = (
    "distance_error_km",
    "median_km",
    "geoscore",
    "continent_acc",
    "country_acc",
    "city_acc",
    "reject_rate",
    "failure_rate",
    *(f"within_{t}km" for t in THRESHOLDS_KM),
)


# The metrics whose design effect is reported: Kish's deff (variance ratio, the linearised
# cluster variance for a mean; deft squared for the median), the effective clips n / deff, and
# deft (cluster interval width / clip interval width). agl.scoring.design says how.
DESIGN_EFFECT = ("distance_error_km", "median_km", "geoscore", "continent_acc", "country_acc",
                 "city_acc")
# The means whose clusters' shares of the variance are read (`influential_clusters`).
INFLUENCE = ("distance_error_km", "geoscore", "continent_acc", "country_acc", "city_acc")
# Default `evaluate.influence_share`: a cluster carrying more of a metric's variance is named.
INFLUENCE_SHARE = 0.2

# The columns of a score table that `summarize` reads.
SUMMARY_COLUMNS = ("distance_km", "city_correct", "country_correct", "continent_correct",
                   "refused", "failed", "status", "pred_lat", "pred_lon")


def metric_columns(scored: pd.DataFrame, geoscore_km: float = GEOSCORE_SCALE_KM
                   ) -> dict[str, tuple[np.ndarray, str]]:
    """Metric name -> (per-row values with NaN = excluded, statistic)."""
    d = scored["distance_km"].to_numpy(dtype=float)
    cols: dict[str, tuple[np.ndarray, str]] = {
        "distance_error_km": (d, "mean"),
        "median_km": (d, "median"),
        "geoscore": (geoscore(d, geoscore_km), "mean"),
        "continent_acc": (scored["continent_correct"].to_numpy(dtype=float), "mean"),
        "country_acc": (scored["country_correct"].to_numpy(dtype=float), "mean"),
        "city_acc": (scored["city_correct"].to_numpy(dtype=float), "mean"),
        "reject_rate": (scored["refused"].to_numpy(dtype=float), "mean"),
        "failure_rate": (scored["failed"].to_numpy(dtype=float), "mean"),
    }
    scored_d = np.isfinite(d)
    for t in THRESHOLDS_KM:
        cols[f"within_{t}km"] = (np.where(scored_d, d < t, np.nan), "mean")
    return cols


def _finite(values: np.ndarray) -> np.ndarray:
    """The finite values (the array itself when all are: no copy of a million rows)."""
    finite = np.isfinite(values)
    return values if finite.all() else values[finite]


def _point(values: np.ndarray, stat: str) -> float:
    v = _finite(values)
    if v.size == 0:
        return float("nan")
    return float(np.mean(v) if stat == "mean" else np.median(v))


def summarize(scored: pd.DataFrame, *, bootstrap: int, seed: int = 0,
              clusters: np.ndarray | None = None, **opts) -> dict:
    """All headline metrics of one score table, their CIs and the counts behind them."""
    return summarize_later(scored, bootstrap=bootstrap, seed=seed, clusters=clusters, **opts)()


def summarize_later(
    scored: pd.DataFrame, *, bootstrap: int, seed: int = 0, clusters: np.ndarray | None = None,
    geoscore_km: float = GEOSCORE_SCALE_KM, influence_share: float = INFLUENCE_SHARE,
) -> Callable[[], dict]:
    """`summarize`, with the bootstrap intervals started now (in threads for a large table);
    calling the result waits for them. Lets a caller summarise several tables at once.

    `clusters` (per-row labels, agl.scoring.clusters): `ci95` resamples whole clusters,
    `ci95_clip` single clips (for comparison); for the DESIGN_EFFECT metrics `design_effect`
    is Kish's deff (variance ratio), `n_effective` the effective clips (n / deff) and `deft`
    the ratio of the two intervals' widths; `n_clusters` counts the clusters,
    `n_effective_clusters` is Kish's effective number of them, and `influential_clusters`
    names those carrying more than `influence_share` of a mean's cluster variance (where the
    table has the truth's city and country to name them by). Without: clips, `ci95` only."""
    out: dict = {"n": int(len(scored))}
    columns = metric_columns(scored, geoscore_km)
    intervals = intervals_later(columns, bootstrap, seed, len(scored), clusters)
    clip_intervals = intervals_later(columns, bootstrap, seed, len(scored), None) if clusters is not None else None
    for name, (values, stat) in columns.items():
        out[name] = _point(values, stat)
    d = scored["distance_km"].to_numpy(dtype=float)
    out["n_distance_scored"] = int(np.isfinite(d).sum())
    out["n_distance_excluded"] = int((~np.isfinite(d)).sum())
    for level in ("city", "country", "continent"):
        out[f"n_{level}_scored"] = int(scored[f"{level}_correct"].notna().sum())
    out.update(counts(scored))
    if clusters is not None:
        out["n_clusters"] = int(np.unique(clusters).size)
        out["n_effective_clusters"] = design.effective_clusters(clusters)
        out["design_effect"] = {k: design.kish_deff(columns[k][0], clusters)
                                for k in DESIGN_EFFECT if columns[k][1] == "mean"}
        out["influential_clusters"] = influential(scored, columns, clusters, influence_share)

    def finish() -> dict:
        out["ci95"] = intervals()
        if clip_intervals is not None:
            out["ci95_clip"] = clip_intervals()
            out["deft"] = {k: design_effect(out["ci95"][k], out["ci95_clip"][k]) for k in DESIGN_EFFECT}
            # the median has no linearised variance here: deft squared, the bootstrap's ratio
            out["design_effect"] = {k: out["design_effect"].get(k, out["deft"][k] ** 2)
                                    for k in DESIGN_EFFECT}
            out["n_effective"] = {k: _effective(columns[k][0], out["design_effect"][k])
                                  for k in DESIGN_EFFECT}
        return out

    return finish


def _effective(values: np.ndarray, deff: float) -> float:
    """The effective number of clips behind a metric: its scored clips over Kish's deff."""
    return float(np.isfinite(values).sum() / deff) if deff > 0 else float("nan")


def influential(scored: pd.DataFrame, columns: dict[str, tuple[np.ndarray, str]],
                clusters: np.ndarray, share: float) -> dict[str, list[dict]]:
    """Per INFLUENCE metric, the clusters of two or more clips carrying more than `share` of its
    cluster-robust variance, largest first: name (the commonest true city and country of its clips), clips
    and share. Empty where the table has no truth labels (a speech split)."""
    if "true_city" not in scored or "true_country" not in scored:
        return {}
    labels = np.asarray(clusters, dtype=np.int64)
    out: dict[str, list[dict]] = {}
    for k in INFLUENCE:
        values = columns[k][0]
        finite = np.isfinite(values)
        shares = design.variance_shares(values, labels)
        kept, inverse = np.unique(labels[finite], return_inverse=True)
        sizes = np.bincount(inverse)
        rows = []
        for g in np.argsort(-shares, kind="stable"):
            if shares[g] <= share:
                break
            if sizes[g] < 2:  # one clip far from the mean is an outlier, not a cluster's clips
                continue      # moving together (its error shows in the per-clip tables)
            rows.append({"cluster": _cluster_name(scored, labels == kept[g]), "clips": int(sizes[g]),
                         "share": float(shares[g])})
        out[k] = rows
    return out


def _cluster_name(scored: pd.DataFrame, mask: np.ndarray) -> str:
    places = (scored["true_city"].astype(str).to_numpy()[mask], scored["true_country"].astype(str).to_numpy()[mask])
    pairs = pd.Series([f"{c}, {k}" for c, k in zip(*places, strict=True)])
    return str(pairs.value_counts().index[0])


def no_coordinates(scored: pd.DataFrame) -> np.ndarray:
    """Rows without a usable coordinate that the protocol scored at its fixed distance. Both
    protocols leave `pred_lat`/`pred_lon` NaN exactly there, and for the rows they exclude
    from the distance metrics (distance NaN: an unparseable coordinate), which are not these."""
    lat, lon = (scored[c].to_numpy(dtype=float) for c in ("pred_lat", "pred_lon"))
    d = scored["distance_km"].to_numpy(dtype=float)
    return (np.isnan(lat) | np.isnan(lon)) & np.isfinite(d)


def counts(scored: pd.DataFrame) -> dict[str, int]:
    """The three counts of the module docstring: refused (status), no coordinates (the fixed
    distance), rejected (any field refused, the reject rate's numerator)."""
    cut = int((scored["status"] == "truncated").sum())
    return {"n_refused": int((scored["status"] == "refused").sum()),
            "n_no_coordinates": int(no_coordinates(scored).sum()),
            "n_rejected": int(scored["refused"].to_numpy(dtype=bool).sum()),
            # Replies cut at the output limit, apart from refusals and failures (present only
            # where there are some: a run without any keeps its metrics.json bytes).
            **({"n_truncated": cut} if cut else {})}


def design_effect(cluster: list[float], clip: list[float]) -> float:
    """Width of the cluster interval over the clip interval's (NaN where either is missing
    or the clip interval has no width)."""
    wide, narrow = cluster[1] - cluster[0], clip[1] - clip[0]
    if not (np.isfinite(wide) and np.isfinite(narrow)) or narrow <= 0:
        return float("nan")
    return float(wide / narrow)


def intervals_later(columns: dict[str, tuple[np.ndarray, str]], n: int, seed: int,
                     rows: int, clusters: np.ndarray | None) -> Callable[[], dict[str, list[float]]]:
    """Each metric's interval (the i-th metric seeded `seed + i`), started now; calling the
    result waits for them.

    A large table draws them in threads: the binned draws (sorting, Poisson counts) release
    the GIL, and every metric has its own generator, so the intervals are those drawn one
    after the other. A small table takes the exact row bootstrap, whose warning filter is
    process-wide, so its intervals are drawn in turn, on the first call.
    """
    jobs = [(name, values, stat, seed + i) for i, (name, (values, stat)) in enumerate(columns.items())]

    def interval(job: tuple[str, np.ndarray, str, int]) -> list[float]:
        _, values, stat, job_seed = job
        if clusters is not None and rows > EXACT_LIMIT:
            job_seed = seed  # the binned cluster route: one shared draw (resample.bin_counts)
        return list(cluster_ci(values, stat=stat, n=n, seed=job_seed, clusters=clusters))

    if rows <= EXACT_LIMIT:
        return lambda: {job[0]: interval(job) for job in jobs}
    pool = ThreadPoolExecutor(usable_cpus())
    futures = [pool.submit(interval, job) for job in jobs]
    pool.shutdown(wait=False)  # the threads end once the queue is done
    return lambda: {job[0]: future.result() for job, future in zip(jobs, futures, strict=True)}


def cluster_ci(values, stat: str, n: int, seed: int = 0,
               clusters: np.ndarray | None = None) -> tuple[float, float]:
    """Percentile 95% interval of `stat` over the non-NaN values, whole clusters resampled
    (labels 0..G-1 per row, agl.scoring.clusters). No labels: the row bootstrap
    (`bootstrap_ci`). Clusters of single clips numbered as the rows give the row bootstrap's
    draws by construction on a small table (the exact and index routes make the same random
    calls and sums; tests check it bit for bit) and by delegation on a large one (the binned
    routes bin rows by value, clusters by influence). A proportion of 0 or 1 gets the Wilson
    interval with Kish's effective clusters (agl.scoring.design); a single cluster no
    interval (NaN): resampling one cluster only ever gives it back."""
    values = np.asarray(values, dtype=float)
    if clusters is None:
        return bootstrap_ci(values, stat, n, seed)
    labels = np.asarray(clusters, dtype=np.int64)
    groups = int(labels.max()) + 1 if labels.size else 0
    if groups == len(values) and len(values) > EXACT_LIMIT:  # single clips: the clip route
        return bootstrap_ci(values, stat, n, seed)
    if n <= 0 or not np.isfinite(values).any():
        return (float("nan"), float("nan"))
    present = labels[np.isfinite(values)]
    if present.min() == present.max():
        # One cluster: every resample is that cluster, so the "interval" would be [x, x].
        # Nothing to resample: no interval (NaN), said as such where printed.
        return (float("nan"), float("nan"))
    if stat == "mean" and (fixed := design.degenerate_interval(values, labels)) is not None:
        return fixed  # a proportion of 0 or 1: Wilson with Kish's effective clusters
    if len(values) > EXACT_LIMIT:  # 0/1 columns too: their count patterns are many
        # One draw of bin counts per (clusters, resamples, seed), shared by the metrics.
        return _percentiles(resample.binned_draws(values, labels, groups, stat, n, int(seed)))
    rng = np.random.default_rng(seed)
    draws = None
    if stat == "mean" and np.isin(_finite(values), (0.0, 1.0)).all():
        draws = resample.binary_draws(values, labels, groups, n, rng)
    if draws is None:
        draws = resample.index_draws(values, labels, groups, stat, n, rng)
    return _percentiles(draws)


def _percentiles(draws: np.ndarray) -> tuple[float, float]:
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return (float("nan"), float("nan"))
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return (float(lo), float(hi))


def bootstrap_ci(
    values, stat: str, n: int, seed: int = 0
) -> tuple[float, float]:
    """Percentile 95% interval of `stat` over the non-NaN values, rows resampled with NaNs;
    a proportion of 0 or 1 gets the Wilson interval (a bootstrap of it has zero width), and
    a single value no interval (NaN)."""
    values = np.asarray(values, dtype=float)
    v = _finite(values)
    if n <= 0 or v.size < 2:  # one clip: every resample is that clip, no interval
        return (float("nan"), float("nan"))
    if stat == "mean" and (fixed := design.degenerate_interval(v, None)) is not None:
        return fixed  # a proportion of 0 or 1: the Wilson interval, never zero width
    rng = np.random.default_rng(seed)
    if stat == "mean" and np.isin(v, (0.0, 1.0)).all():
        draws = _binary_draws(int((v == 1).sum()), int((v == 0).sum()), len(values) - v.size, n, rng)
    elif len(values) <= EXACT_LIMIT:
        draws = _row_draws(values, stat, n, rng)
    else:
        draws = _binned_draws(values, stat, n, rng)
    return _percentiles(draws)


def _binary_draws(ones: int, zeros: int, nans: int, n: int, rng) -> np.ndarray:
    total = ones + zeros + nans
    counts = rng.multinomial(total, np.array([ones, zeros, nans]) / total, size=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return counts[:, 0] / (counts[:, 0] + counts[:, 1])


def _row_draws(values: np.ndarray, stat: str, n: int, rng) -> np.ndarray:
    reduce: Callable = np.nanmean if stat == "mean" else np.nanmedian
    size = len(values)
    chunk = max(1, 4_000_000 // size)
    out = []
    with np.errstate(invalid="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN resample is NaN
            for start in range(0, n, chunk):
                idx = rng.integers(0, size, size=(min(chunk, n - start), size))
                out.append(reduce(values[idx], axis=1))
    return np.concatenate(out)


def _binned_draws(values: np.ndarray, stat: str, n: int, rng) -> np.ndarray:
    finite = values[np.isfinite(values)]
    order = np.sort(finite)
    edges = np.linspace(0, order.size, _BINS + 1).astype(int)
    sizes = np.diff(edges)
    keep = sizes > 0
    sums = np.add.reduceat(order, edges[:-1][keep])
    means = sums / sizes[keep]
    # Poisson bootstrap: independent Poisson(expected count) bin counts, the standard
    # large-n form of the multinomial resample, ~20x cheaper to draw.
    counts = rng.poisson(sizes[keep].astype(float), size=(n, means.size))
    if stat == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return counts @ means / counts.sum(axis=1)
    cum = np.cumsum(counts, axis=1)
    half = cum[:, -1] / 2.0
    pos = (cum < half[:, None]).sum(axis=1)
    return means[np.minimum(pos, means.size - 1)]
