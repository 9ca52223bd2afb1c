"""Who the models fail: headline metrics by group of recording places, and the disparity.

`agl evaluate --by income | region | subregion | country | language | speech`
(docs/metrics.md#groups-and-disparity). A clip's group comes from its recording place (the
country by its coordinates, agl.scoring.places, whatever `labels` scored it) through
agl.scoring.covariates, or from its speech flag.

* Each group: n clips, n countries, n clusters (the run's unit), and each metric with a 95%
  interval that resamples **countries** (whole countries with every clip in them: a group
  comparison is a comparison of places, and clips of one country share its language, birds
  and recordists). A group of one country gets no interval (nothing to resample). A share
  of 0 or 1 in a group (resampling can only repeat it) gets the Wilson interval with Kish's
  effective number of the group's countries, as the run's own cells (agl.scoring.design).
* Groups under `min_support` clips are pooled: income levels with their neighbours in order
  ("Low + Lower middle"), other covariates into one "other" row naming its members; a pool
  still under it, or the unlisted countries under it, is withheld ("insufficient data"),
  as the report withholds every estimate without support. Pooled rows are marked.
* Disparity per metric over the groups shown: the worst and best group, the gap (best minus
  worst, in the metric's unit, always >= 0) and the ratio (best / worst for a share;
  WorldBench's worst / best mean error for km), with intervals from the same stratified
  country resamples (countries drawn within each group), the two groups held fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from agl.errors import AglError
from agl.scoring import covariates, design, places

BY = ("income", "region", "subregion", "country", "language", "speech")
# metric -> (score table column, higher is better); the means the groups compare
METRICS = {"country_acc": ("country_correct", True), "continent_acc": ("continent_correct", True),
           "city_acc": ("city_correct", True), "distance_error_km": ("distance_km", False)}
UNLISTED = "unlisted"


@dataclass(frozen=True)
class GroupSpec:
    """How to group: the covariate, the support floor, resamples and seed."""

    by: str
    min_support: int = 10
    bootstrap: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.by not in BY:
            raise AglError(f"--by: '{self.by}' is not a grouping; choose one of {', '.join(BY)}")


def group_keys(scored: pd.DataFrame, by: str) -> tuple[np.ndarray, np.ndarray]:
    """Per clip: its group (None: unlisted) and its country by point (ISO alpha-3)."""
    iso = places.locate(scored["true_lat"], scored["true_lon"]).iso3
    if by == "speech":
        keys = np.where(scored["has_speech"].to_numpy(dtype=bool), "speech", "non-speech").astype(object)
    elif by == "country":
        keys = np.array([places.short_name(c) for c in iso], dtype=object)
    else:
        keys = np.array([covariates.covariate(by, c) for c in iso], dtype=object)
    return keys, iso


def _order(by: str, names: list[str]) -> list[str]:
    if by == "income":
        return [n for n in covariates.INCOME_ORDER if n in names] + sorted(set(names) - set(covariates.INCOME_ORDER))
    return sorted(names)


def pool(by: str, sizes: dict[str, int], min_support: int) -> list[tuple[list[str], bool]]:
    """The rows: (member groups, pooled?) in order. Income levels merge with their
    neighbours upward until they reach `min_support` (a short last run joins the row below
    it); other groups under it join one "other" row. Unlisted stays apart."""
    listed = _order(by, [g for g in sizes if g != UNLISTED])
    rows: list[list[str]] = []
    if by == "income":
        run: list[str] = []
        for g in listed:
            run.append(g)
            if sum(sizes[m] for m in run) >= min_support:
                rows.append(run)
                run = []
        if run:
            if rows:
                rows[-1] = rows[-1] + run
            else:
                rows.append(run)
    else:
        big = [[g] for g in listed if sizes[g] >= min_support]
        small = [g for g in listed if sizes[g] < min_support]
        rows = big + ([small] if small else [])
    if UNLISTED in sizes:
        rows.append([UNLISTED])
    return [(r, len(r) > 1) for r in rows]


def _label(by: str, members: list[str]) -> str:
    if len(members) == 1:
        return members[0]
    return " + ".join(members) if by == "income" else "other: " + ", ".join(members)


def _means(values: np.ndarray, rows_of: list[np.ndarray]) -> np.ndarray:
    out = np.full(len(rows_of), np.nan)
    for i, rows in enumerate(rows_of):
        v = values[rows]
        v = v[np.isfinite(v)]
        if v.size:
            out[i] = v.mean()
    return out


def _draws(values: np.ndarray, groups: list[np.ndarray], countries: np.ndarray,
           spec: GroupSpec) -> np.ndarray:
    """(bootstrap x groups) means, each group's countries resampled within it (one shared
    draw per resample across metrics: the seed alone decides it)."""
    rng = np.random.default_rng(spec.seed)
    out = np.full((spec.bootstrap, len(groups)), np.nan)
    for j, rows in enumerate(groups):
        codes, labels = np.unique(countries[rows], return_inverse=True)
        k = len(codes)
        v = values[rows]
        finite = np.isfinite(v)
        sums = np.bincount(labels[finite], weights=v[finite], minlength=k)
        counts = np.bincount(labels[finite], minlength=k).astype(float)
        if k < 2:
            continue  # one country: no interval across countries
        idx = rng.integers(0, k, size=(spec.bootstrap, k))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, j] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return out


def _ci(draws: np.ndarray) -> list[float] | None:
    d = draws[np.isfinite(draws)]
    if d.size < max(2, len(draws) // 2):
        return None
    lo, hi = np.percentile(d, [2.5, 97.5])
    return [float(lo), float(hi)]


def by_group(scored: pd.DataFrame, spec: GroupSpec, *, clusters: np.ndarray | None = None) -> dict[str, Any]:
    """The groups table and the disparity summary of one score table (see the module)."""
    keys, iso = group_keys(scored, spec.by)
    keys = np.array([UNLISTED if k is None else k for k in keys], dtype=object)
    countries = np.array([c or "?" for c in iso], dtype=object)
    sizes = {g: int((keys == g).sum()) for g in pd.unique(keys)}
    rows_out, shown = [], []
    for members, pooled in pool(spec.by, sizes, spec.min_support):
        rows = np.flatnonzero(np.isin(keys, members))
        row: dict[str, Any] = {"group": _label(spec.by, members), "members": members, "pooled": pooled,
                               "n": int(rows.size), "n_countries": int(np.unique(countries[rows]).size)}
        if clusters is not None:
            row["n_clusters"] = int(np.unique(clusters[rows]).size)
        if rows.size < spec.min_support:
            row["withheld"] = f"insufficient data (n = {rows.size}, needs {spec.min_support})"
        else:
            shown.append((row, rows))
        rows_out.append(row)
    groups = [rows for _, rows in shown]
    disparity: dict[str, Any] = {}
    for name, (column, higher) in METRICS.items():
        values = scored[column].to_numpy(dtype=float)
        point = _means(values, groups)
        draws = _draws(values, groups, countries, spec) if spec.bootstrap and groups else None
        for j, (row, rows) in enumerate(shown):
            row[name] = None if np.isnan(point[j]) else float(point[j])
            row[f"{name}_ci95"] = None if draws is None else _ci(draws[:, j])
            if row[f"{name}_ci95"] is not None:  # two or more countries resampled
                # A share of 0 or 1 in the group: every resample repeats it ([0, 0]), so the
                # Wilson interval with Kish's effective number of its countries, as a run's
                # own cells get it with the effective number of its clusters.
                units = np.unique(countries[rows], return_inverse=True)[1]
                fixed = design.degenerate_interval(values[rows], units)
                if fixed is not None:
                    row[f"{name}_ci95"] = [float(fixed[0]), float(fixed[1])]
        disparity[name] = _disparity(point, draws, [r["group"] for r, _ in shown], higher)
    return {"by": spec.by, "min_support": spec.min_support, "resampled": "country",
            "bootstrap": spec.bootstrap, "seed": spec.seed,
            "source": covariates.source(spec.by) if spec.by in covariates.COVARIATES else None,
            "groups": rows_out, "disparity": disparity}


def _disparity(point: np.ndarray, draws: np.ndarray | None, names: list[str], higher: bool) -> dict[str, Any]:
    ok = np.flatnonzero(np.isfinite(point))
    if ok.size < 2:
        return {"withheld": "fewer than two groups with support"}
    tie = np.ptp(point[ok]) == 0  # every group the same: no worst or best is named
    best = ok[np.argmax(point[ok])] if higher else ok[np.argmin(point[ok])]
    worst = ok[np.argmin(point[ok])] if higher else ok[np.argmax(point[ok])]
    if tie:  # the interval still compares two groups: the first and the last
        best, worst = ok[0], ok[-1]
    sign = 1.0 if higher else -1.0

    def gap(a):
        return sign * (a[..., best] - a[..., worst])

    def ratio(a):
        with np.errstate(invalid="ignore", divide="ignore"):
            return a[..., best] / a[..., worst] if higher else a[..., worst] / a[..., best]

    r0 = float(ratio(point))  # a worst share of 0: no ratio (None, never inf in JSON)
    out = {"worst": None if tie else names[worst], "best": None if tie else names[best],
           "gap": float(gap(point)),
           "ratio": r0 if np.isfinite(r0) else None, "gap_ci95": None, "ratio_ci95": None}
    if draws is not None:
        out["gap_ci95"] = _ci(gap(draws))
        r = ratio(draws)
        out["ratio_ci95"] = _ci(np.where(np.isfinite(r), r, np.nan))
    return out


def groups_lines(table: dict[str, Any]) -> list[str]:
    """The groups and the disparity as plain text for the terminal."""
    def fmt(x, pattern="{:.3f}"):
        return "—" if x is None else pattern.format(x)

    def span(ci, pattern="{:.3f}"):
        return "" if not ci else f" [{pattern.format(ci[0])}, {pattern.format(ci[1])}]"

    lines = [f"by {table['by']} (intervals resample countries; groups under {table['min_support']} "
             "clips pooled, * = pooled)" + (f"; source: {table['source']}" if table["source"] else "")]
    for row in table["groups"]:
        name = row["group"] + (" *" if row["pooled"] else "")
        head = f"  {name:<40} n={row['n']:>5} countries={row['n_countries']:>3}"
        if "withheld" in row:
            lines.append(f"{head}  {row['withheld']}")
            continue
        lines.append(f"{head}  country {fmt(row['country_acc'])}{span(row['country_acc_ci95'])}"
                     f"  mean km {fmt(row['distance_error_km'], '{:.0f}')}"
                     f"{span(row['distance_error_km_ci95'], '{:.0f}')}")
    for name, d in table["disparity"].items():
        if "withheld" in d:
            lines.append(f"  disparity {name}: {d['withheld']}")
            continue
        lines.append(f"  disparity {name}: worst {d['worst'] or '— (a tie)'}, best {d['best'] or '—'}, "
                     f"gap {d['gap']:.3f}"
                     f"{span(d['gap_ci95'])}, ratio {fmt(d['ratio'], '{:.2f}')}"
                     f"{span(d['ratio_ci95'], '{:.2f}')}")
    return lines
