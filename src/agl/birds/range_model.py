"""Where would these birds be heard together? Inverting BirdNET's range meta-model.

BirdNET's meta-model gives p_s(lat, lon, week): how likely species s occurs at a place in a
week of BirdNET's 48-week year (week -1: year-round). For the species a clip's detections
name (w_s: the detection's confidence), the guess is the land cell that maximises

* `vote` (default): sum_s w_s * p_s(cell), the expected number of the heard species that
  occur there; or
* `log`: sum_s w_s * log(max(p_s(cell), floor)), the joint plausibility if every detection
  were right.

Why `vote` is the default: one misidentification vetoes the right place under `log`. On the
real Berlin clip BirdNET hears Eurasian Blackbird, Common Swift, Mistle Thrush and (0.80)
Chinese Blackbird; `log` (floor 0.01 or 0.05) puts the guess in western China, 6,100 km off,
where all four occur a little; `vote` puts it in north-western Russia, 2,000 km off. Ties go
to the first cell in grid order (south-west first).

The grid: cell centres every `resolution_deg` degrees that fall on GSHHS land (the same
coarse shoreline `agl.core.worldmap` draws; an island smaller than a cell can be missed). The
meta-model is evaluated at every cell once per (model file, resolution, week, floor) and
cached content-addressed under `cache_dir` as a compressed column store (per species, the
cells where p >= floor); the city/country/continent of each cell come from the project's
offline reverse geocoder (`agl.dataset.crawl.reverse_geocode`), so a guess is a lookup.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from agl.birds.birdnet import META_FILE, file_sha256, interpreter, labels, model_dir
from agl.core import diskwrite, worldmap
from agl.dataset.crawl import reverse_geocode
from agl.errors import AglError

GRID_VERSION = 1
YEAR_ROUND = -1


def week_48(day: date) -> int:
    """BirdNET's week: four per month (days 1-7, 8-14, 15-21, 22-end), 1..48."""
    return (day.month - 1) * 4 + min(4, math.ceil(day.day / 7))


def week_of(text: str | None) -> int:
    """The week of an ISO date (YYYY-MM-DD...), or YEAR_ROUND for an empty/absent date."""
    if not text or not str(text).strip() or str(text).strip().lower() == "nan":
        return YEAR_ROUND
    try:
        return week_48(date.fromisoformat(str(text).strip()[:10]))
    except ValueError:
        raise AglError(
            f"date '{text}' is not an ISO date (YYYY-MM-DD); fix the manifest's "
            "date column or leave it empty (year-round)"
        ) from None


def land_cells(resolution_deg: float, shoreline: str = "c") -> tuple[np.ndarray, np.ndarray]:
    """(lat, lon) of the grid's cell centres that lie on GSHHS land, south-west first."""
    from matplotlib.path import Path as Polygon

    r = float(resolution_deg)
    if not 0 < r <= 30:
        raise AglError(f"birdrange: resolution_deg must be in (0, 30], got {resolution_deg}")
    lats = np.arange(-90 + r / 2, 90, r)
    lons = np.arange(-180 + r / 2, 180, r)
    glat, glon = (a.ravel() for a in np.meshgrid(lats, lons, indexing="ij"))
    pts = np.column_stack([glon, glat])
    on = np.zeros(len(pts), dtype=bool)
    for poly in worldmap.land(shoreline):
        lo, hi = poly.min(axis=0), poly.max(axis=0)
        box = ~on & (pts[:, 0] >= lo[0]) & (pts[:, 0] <= hi[0]) & (pts[:, 1] >= lo[1]) & (pts[:, 1] <= hi[1])
        if box.any():
            on[box] = Polygon(poly).contains_points(pts[box])
    return glat[on], glon[on]


@dataclass(frozen=True)
class OccurrenceGrid:
    """p_s(cell) >= floor, stored per species (column store); below floor reads as floor."""

    lat: np.ndarray
    lon: np.ndarray
    week: int
    floor: float
    indptr: np.ndarray  # (n_classes + 1,) offsets into cells/values
    cells: np.ndarray  # int32 cell index
    values: np.ndarray  # float16 occurrence
    city: np.ndarray
    country: np.ndarray
    continent: np.ndarray

    @property
    def size(self) -> int:
        return int(self.lat.size)

    def log_occurrence(self, j: int) -> np.ndarray:
        """log(max(p_j, floor)) at every cell."""
        col = np.full(self.size, math.log(self.floor))
        a, b = int(self.indptr[j]), int(self.indptr[j + 1])
        col[self.cells[a:b]] = np.log(np.maximum(self.values[a:b].astype(float), self.floor))
        return col

    def occurrence(self, j: int) -> np.ndarray:
        """p_j at every cell (0 below floor)."""
        col = np.zeros(self.size)
        a, b = int(self.indptr[j]), int(self.indptr[j + 1])
        col[self.cells[a:b]] = self.values[a:b].astype(float)
        return col

    def range_share(self, j: int) -> float:
        """Share of land cells where class j occurs at p >= floor."""
        return float(self.indptr[j + 1] - self.indptr[j]) / max(self.size, 1)


def grid_key(model_sha256: str, resolution_deg: float, week: int, floor: float, shoreline: str) -> str:
    blob = json.dumps(
        {
            "model": model_sha256,
            "resolution_deg": float(resolution_deg),
            "week": int(week),
            "floor": float(floor),
            "shoreline": shoreline,
            "version": GRID_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def compute_grid(
    lat: np.ndarray, lon: np.ndarray, week: int, floor: float, *, threads: int = 2, chunk: int = 4096
) -> OccurrenceGrid:
    """Evaluate the meta-model at every cell (the slow part: ~0.5 ms per cell on 2 cores)."""
    interp = interpreter(model_dir() / META_FILE, threads)
    inp = interp.get_input_details()[0]["index"]
    out = interp.get_output_details()[0]["index"]
    cols: list[list[np.ndarray]] | None = None
    vals: list[list[np.ndarray]] | None = None
    shape = 0
    for start in range(0, lat.size, chunk):
        x = np.column_stack(
            [lat[start : start + chunk], lon[start : start + chunk], np.full(min(chunk, lat.size - start), float(week))]
        ).astype(np.float32)
        if x.shape[0] != shape:
            interp.resize_tensor_input(inp, list(x.shape))
            interp.allocate_tensors()
            shape = x.shape[0]
        interp.set_tensor(inp, x)
        interp.invoke()
        p = interp.get_tensor(out)
        if cols is None:
            cols, vals = [[] for _ in range(p.shape[1])], [[] for _ in range(p.shape[1])]
        rows, classes = np.nonzero(p >= floor)
        order = np.argsort(classes, kind="stable")
        rows, classes = rows[order], classes[order]
        bounds = np.searchsorted(classes, np.arange(p.shape[1] + 1))
        for j in np.flatnonzero(np.diff(bounds)):
            r = rows[bounds[j] : bounds[j + 1]]
            cols[j].append((r + start).astype(np.int32))
            vals[j].append(p[r, j].astype(np.float16))
    assert cols is not None and vals is not None
    counts = np.array([sum(len(c) for c in col) for col in cols])
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cells = np.concatenate([np.concatenate(c) if c else np.empty(0, np.int32) for c in cols])
    values = np.concatenate([np.concatenate(v) if v else np.empty(0, np.float16) for v in vals])
    places = reverse_geocode(list(zip(lat.tolist(), lon.tolist(), strict=True)))
    city, country, continent = (np.array([p[i] for p in places], dtype=str) for i in range(3))
    return OccurrenceGrid(
        lat, lon, int(week), float(floor), indptr, cells.astype(np.int32), values, city, country, continent
    )


def load_or_build(
    cache_dir: Path, *, resolution_deg: float, week: int, floor: float, shoreline: str = "c", threads: int = 2
) -> tuple[OccurrenceGrid, bool]:
    """The grid from `cache_dir` (content-addressed), or computed and stored there.
    Returns (grid, built_now). Written to a temporary file and renamed: crash-safe."""
    key = grid_key(file_sha256(model_dir() / META_FILE), resolution_deg, week, floor, shoreline)
    path = Path(cache_dir) / f"{key}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            grid = OccurrenceGrid(
                z["lat"],
                z["lon"],
                int(z["week"]),
                float(z["floor"]),
                z["indptr"],
                z["cells"],
                z["values"],
                z["city"],
                z["country"],
                z["continent"],
            )
        return grid, False
    lat, lon = land_cells(resolution_deg, shoreline)
    grid = compute_grid(lat, lon, week, floor, threads=threads)
    with diskwrite.atomic_file(path) as fh:
        np.savez_compressed(
            fh,
            lat=grid.lat,
            lon=grid.lon,
            week=grid.week,
            floor=grid.floor,
            indptr=grid.indptr,
            cells=grid.cells,
            values=grid.values,
            city=grid.city,
            country=grid.country,
            continent=grid.continent,
        )
    return grid, True


@dataclass(frozen=True)
class Driver:
    scientific: str
    common: str
    weight: float
    occurrence: float  # p at the guessed cell
    range_share: float  # share of land cells where it occurs at all
    pull: float  # w * (its score at the guess - its mean over land): how much it chose the place


@dataclass(frozen=True)
class Guess:
    latitude: float
    longitude: float
    city: str
    country: str
    continent: str
    score: float
    drivers: tuple[Driver, ...]
    near_best: int  # land cells scoring within 5% of the best: how ambiguous the surface is


def _class_index() -> dict[str, int]:
    return {lab.scientific: j for j, lab in enumerate(labels())}


SCORINGS = ("vote", "log")


def _column(grid: OccurrenceGrid, j: int, scoring: str, floor: float) -> np.ndarray:
    if scoring == "log":
        return np.maximum(grid.log_occurrence(j), math.log(max(floor, grid.floor)))
    return grid.occurrence(j)


def surface(
    grid: OccurrenceGrid, species: Sequence[tuple[str, float]], *, scoring: str = "vote", floor: float = 0.01
) -> np.ndarray:
    """score(cell) for (scientific name, weight) pairs; unknown names are an error."""
    if scoring not in SCORINGS:
        raise AglError(f"birdrange: scoring '{scoring}' is not one of {', '.join(SCORINGS)}")
    index = _class_index()
    score = np.zeros(grid.size)
    for name, w in species:
        if name not in index:
            raise AglError(f"birdrange: '{name}' is not a BirdNET class")
        score += float(w) * _column(grid, index[name], scoring, floor)
    return score


def invert(
    grid: OccurrenceGrid, species: Sequence[tuple[str, float]], *, scoring: str = "vote", floor: float = 0.01
) -> Guess:
    """The best land cell for the heard species (see module docstring)."""
    if not species:
        raise AglError("birdrange: no species to invert")
    index, labs = _class_index(), labels()
    score = surface(grid, species, scoring=scoring, floor=floor)
    best = int(np.argmax(score))
    drivers = []
    for name, w in species:
        col = _column(grid, index[name], scoring, floor)
        occ = grid.occurrence(index[name])
        drivers.append(
            Driver(
                name,
                labs[index[name]].common,
                float(w),
                float(occ[best]),
                grid.range_share(index[name]),
                float(w) * float(col[best] - col.mean()),
            )
        )
    drivers.sort(key=lambda d: (-d.pull, d.scientific))
    top = float(score[best])
    near = int((score >= top - 0.05 * max(abs(top), 1e-9)).sum())
    return Guess(
        float(grid.lat[best]),
        float(grid.lon[best]),
        str(grid.city[best]),
        str(grid.country[best]),
        str(grid.continent[best]),
        top,
        tuple(drivers),
        near,
    )


def reasoning(guess: Guess, week: int, resolution_deg: float, top: int = 3, scoring: str = "vote") -> str:
    """Plain words an error-mode analysis can read: which species chose the place."""
    when = "year-round" if week == YEAR_ROUND else f"in week {week} of 48"
    heard = ", ".join(f"{d.scientific} ({d.common}, {d.weight:.2f})" for d in guess.drivers)
    drove = "; ".join(
        f"{d.scientific} ({d.common}: occurrence {d.occurrence:.2f} here, found on {100 * d.range_share:.0f}% of land)"
        for d in guess.drivers[:top]
    )
    return (
        f"BirdNET heard {heard}. Where these occur together {when} (BirdNET meta-model, "
        f"{resolution_deg:g} degree land grid, {scoring} scoring): {guess.city}, {guess.country}"
        f" ({guess.near_best} land cells score within 5% of it). Driven by {drove}."
    )
