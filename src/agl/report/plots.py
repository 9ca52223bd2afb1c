"""Figures of the report, drawn offline with matplotlib's Agg backend.

Each function takes score tables (from `agl.scoring.evaluate.score_run`) or breakdown tables and
writes one PNG; nothing reaches the network. `cdf_points` also gives the CDF as data, for DVC
plots. The world maps are `agl.report.maps`.

A chart with nothing to draw is not drawn: the function returns a `NoData` note (one line
the report prints instead of an empty figure). Figures are sized to be read at the report's
width (about 1,000 px) and saved with a tight bounding box, so no label is clipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from agl.core import diskwrite

CDF_MARKS_KM: tuple[int, ...] = (1, 25, 200, 750, 2500)
CDF_GRID_KM = np.unique(np.round(np.logspace(0, np.log10(20004), 80), 1))
# Error bands of the maps (the CDF's marks: city, region, country, continent scale), so a
# good guess and a bad one differ in colour at a glance, unlike a continuous log scale.
ERROR_BANDS_KM: tuple[float, ...] = (25.0, 200.0, 750.0, 2500.0)
BAND_COLOURS: tuple[str, ...] = ("#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#d73027")
BAND_LABELS: tuple[str, ...] = ("< 25 km", "25-200 km", "200-750 km", "750-2,500 km",
                                ">= 2,500 km")
NO_GUESS_COLOUR = "#a0a0a0"


def error_band(d_km: float) -> int:
    """Index into ERROR_BANDS_KM / BAND_COLOURS of one distance error."""
    return int(np.searchsorted(ERROR_BANDS_KM, d_km, side="right"))


class NoData(str):
    """A one-line note in place of a chart that would be empty."""


def _no_chart(path: Path, note: str) -> NoData:
    """The note, and no stale figure from an earlier run left where the chart would be."""
    Path(path).unlink(missing_ok=True)
    return NoData(note)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def cdf_points(scored: pd.DataFrame, grid=CDF_GRID_KM) -> pd.DataFrame:
    """Share of distance-scored clips with error <= km, on a log-spaced km grid."""
    d = np.sort(scored["distance_km"].dropna().to_numpy(dtype=float))
    share = np.searchsorted(d, grid, side="right") / max(len(d), 1)
    return pd.DataFrame({"km": grid, "share": share})


def cdf_plot(runs: dict[str, pd.DataFrame], path: Path) -> Path:
    """Cumulative distribution of distance error, every run on one chart (log km axis)."""
    if not any(s["distance_km"].notna().any() for s in runs.values()):
        return _no_chart(path, "Distance error: no run has a scored distance; nothing to draw.")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, scored in runs.items():
        d = np.sort(scored["distance_km"].dropna().to_numpy(dtype=float))
        if d.size:
            ax.step(np.maximum(d, 0.1), np.arange(1, d.size + 1) / d.size, where="post",
                    label=f"{name} (n={d.size}{_fixed_score(scored)})")
    for km in CDF_MARKS_KM:
        ax.axvline(km, color="grey", lw=0.7, ls="--")
        ax.text(km, 1.01, f"{km} km", ha="center", va="bottom", fontsize=8, color="grey")
    ax.set(xscale="log", xlim=(0.5, 21000), ylim=(0, 1), xlabel="distance error (km)",
           ylabel="share of clips with error <= x")
    # Beside the axes, not over them: 16 runs of the paper's leaderboard fit without hiding a curve.
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    # The legend widens the image rather than narrowing the axes (a long label squeezed them
    # until the 750 and 2500 km marks overlapped).
    return _save(fig, path, outside=(legend,))


def _fixed_score(scored: pd.DataFrame) -> str:
    """A legend's note on rows without predicted coordinates (refused, failed): the protocol
    scores them at one fixed distance, the vertical step a refusal-heavy run shows there."""
    none = scored["pred_lat"].isna() | scored["pred_lon"].isna()
    fixed = scored.loc[none, "distance_km"].dropna().unique()
    if not none.any() or len(fixed) != 1:
        return ""
    return f"; {int(none.sum())} without coordinates, scored {fixed[0]:,.0f} km"


def confusion_heatmap(table: pd.DataFrame, path: Path, *, title: str = "") -> Path | NoData:
    """Continent confusion, each row normalised to the share of its true continent."""
    if table.empty or not table.to_numpy().sum():
        return _no_chart(path, f"{title}: no clip to count; no confusion heat map.".strip(": "))
    plt = _plt()
    counts = table.to_numpy(dtype=float)
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(1.0 * table.shape[1] + 4.5, 0.55 * table.shape[0] + 2.2))
    im = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    for (i, j), v in np.ndenumerate(counts):
        ax.text(j, i, f"{int(v)}", ha="center", va="center", fontsize=8,
                color="white" if share[i, j] > 0.5 else "black")
    ax.set_xticks(range(table.shape[1]), table.columns, rotation=35, ha="right")
    ax.set_yticks(range(table.shape[0]),
                  [f"{t} (n = {int(k):,})" for t, k in zip(table.index, counts.sum(axis=1),
                                                           strict=True)])
    ax.set(xlabel="predicted continent", ylabel="true continent", title=title)
    fig.colorbar(im, ax=ax, label="share of the row's clips", fraction=0.08, pad=0.04)
    return _save(fig, path)


def _supported_groups(tables: dict[str, pd.DataFrame], levels: tuple[str, ...],
                      min_support: int) -> tuple[list[str], dict[str, list[int]]]:
    """The continents some run supports at some level, and the n of each estimate below support."""
    keep: dict[str, set] = {}
    dropped: dict[str, list[int]] = {}
    for level in levels:
        for t in tables.values():
            for _, r in t.iterrows():
                n = int(r[f"{level}_n"])
                if n >= min_support:
                    keep.setdefault(level, set()).add(r["group"])
                elif n > 0:  # n = 0: not applicable (a run without that field), not a gap
                    dropped.setdefault(r["group"], []).append(n)
    return (sorted(set().union(*keep.values())) if keep else []), dropped


def accuracy_by_continent(tables: dict[str, pd.DataFrame], path: Path, *,
                          min_support: int = 1) -> Path | NoData:
    """Continent and country accuracy per true continent: one dot per run with its 95% CI,
    continents as rows (labelled with n). An estimate on fewer than `min_support` scored
    clips is not drawn; a continent no run supports is left out and named under the chart
    (e.g. AGL1K's '(unknown)': the 6 Vatican rows have no continent to score)."""
    levels = ("continent", "country")
    groups, dropped = _supported_groups(tables, levels, min_support)
    if not groups and not dropped:
        return _no_chart(path, "Accuracy by true continent: not applicable, no run names a "
                         "continent or country; no chart.")
    if not groups:
        ns = sorted({n for v in dropped.values() for n in v})
        span = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
        return _no_chart(path, f"Accuracy by true continent: insufficient data (n = {span} scored clips "
                      f"per continent, needs {min_support}); no chart.")
    plt = _plt()
    names = list(tables)
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    row_h = min(0.32 * max(len(names), 2), 1.6)  # 16 runs x 7 continents stays ~13 in tall
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.2 + row_h * len(groups)), sharey=True)
    step = 0.8 / max(len(names), 1)
    y = np.arange(len(groups))[::-1].astype(float)
    for ax, level in zip(axes, levels, strict=True):
        for k, name in enumerate(names):
            t = tables[name].set_index("group").reindex(groups)
            acc = t[f"{level}_acc"].to_numpy(dtype=float)
            ok = t[f"{level}_n"].fillna(0).to_numpy() >= min_support
            lo = np.clip(acc - t[f"{level}_acc_lo"].to_numpy(dtype=float), 0, None)
            hi = np.clip(t[f"{level}_acc_hi"].to_numpy(dtype=float) - acc, 0, None)
            yy = y + 0.4 - step * (k + 0.5)
            ax.errorbar(acc[ok], yy[ok], xerr=np.vstack([lo[ok], hi[ok]]), fmt="o",
                        color=cmap(k % cmap.N), markersize=5 if len(names) <= 6 else 3.5,
                        capsize=2, lw=1.2,
                        label=name if level == "continent" else None)
        ax.set(xlim=(-0.02, 1.02), xlabel=f"{level} accuracy (95% CI)")
        ax.grid(axis="x", alpha=0.3)
        for b in y[:-1]:
            ax.axhline(b - 0.5, color="#dddddd", lw=0.6)
    def n_of(g: str) -> str:
        ns = sorted({int(t.set_index("group").at[g, "n"]) for t in tables.values()
                     if g in set(t["group"])})
        return f"{ns[0]:,}" if len(ns) == 1 else f"{ns[0]:,}-{ns[-1]:,}"
    axes[0].set_yticks(y, [f"{g} (n = {n_of(g)})" for g in groups])
    axes[0].set_title("continent accuracy by true continent", fontsize=10)
    axes[1].set_title("country accuracy by true continent", fontsize=10)
    fig.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(names), 4),
               fontsize=8, frameon=False)
    gaps = sorted((g, min(v)) for g, v in dropped.items())
    if gaps:
        text = "; ".join(f"{g} n = {n}" for g, n in gaps[:6]) + ("; ..." if len(gaps) > 6 else "")
        fig.text(0.01, -0.06 - 0.02 * ((len(names) - 1) // 4), "not drawn (insufficient "
                 f"data, needs {min_support} scored clips): {text}", fontsize=8, color="#555555")
    return _save(fig, path)


def error_mode_bars(table: pd.DataFrame, path: Path) -> Path:
    """Stacked bars: share of each error mode among a run's wrong predictions."""
    if table.empty or not table.to_numpy().sum():
        return _no_chart(path, "Error modes: no wrong prediction in any run; nothing to draw.")
    plt = _plt()
    share = table.div(table.sum(axis=1).replace(0, 1), axis=0)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(table) + 4), 5))
    bottom = np.zeros(len(share))
    cmap = plt.get_cmap("tab10")
    for i, mode in enumerate(share.columns):
        ax.bar(share.index, share[mode], bottom=bottom, label=mode, color=cmap(i % 10))
        bottom += share[mode].to_numpy()
    ax.set(ylim=(0, 1), ylabel="share of wrong predictions", title="error modes")
    ax.legend(bbox_to_anchor=(1.01, 1), loc="upper left", fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    return _save(fig, path)


def _save(fig, path: Path, *, outside=()) -> Path:
    """Write the figure (its format from the suffix) and close it. `outside`: artists (a
    legend beside the axes) the layout leaves out, so they widen the saved image instead of
    narrowing the axes."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for artist in outside:
        artist.set_in_layout(False)
    fig.tight_layout()
    for artist in outside:  # back in, so the tight bounding box below keeps them
        artist.set_in_layout(True)
    # Tracked outputs: no "Software: matplotlib x.y" (a library version) nor a creation date
    # in the file, and SVG ids from a fixed salt, so the bytes depend on the data alone.
    meta = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None},
            "pdf": {"CreationDate": None, "Creator": None, "Producer": None}}
    kind = path.suffix.lstrip(".").lower()
    with plt.rc_context({"svg.hashsalt": "agl"}), diskwrite.atomic_file(path) as fh:
        fig.savefig(fh, dpi=90, bbox_inches="tight",  # nothing clipped (colour-bar labels)
                    format=kind, metadata=meta.get(kind))
    plt.close(fig)
    return path
