"""Clusters of clips: the unit a bootstrap resamples (docs/metrics.md#clusters).

AGL1K's clips are not independent: 1,444 clips sit in 698 cells of 0.1 degree, one Berlin
cell holds 79, and 118 are labelled Taipei. Clips of one place share language, birds and
often the recordist, so a model that knows the place gets them right together. An interval
that resamples clips one by one then understates the uncertainty; resampling whole clusters
does not. The unit is named by a string:

* `clip` - every clip its own cluster (the independent bootstrap);
* `cell:<degrees>` - the latitude/longitude grid cell of that size, centred on the multiples
  of the size (coordinates rounded to it), holding the true location;
* `city` - the manifest's city and country labels (trimmed, case-folded);
* `site:<km>` - single-linkage clusters of true locations closer than that many km (great
  circle), so a chain of nearby recordings is one cluster.

Labels come from the truth columns of a score table (`true_lat`, `true_lon`, `true_city`,
`true_country`: the manifest's), or of a manifest (`latitude`, ...), deterministically: a
clip's cluster is numbered by the first row of that cluster, so the labels follow the rows'
order and a unit whose clusters are all single clips numbers them 0, 1, 2, ... like the rows
(then the cluster bootstrap draws exactly the clip bootstrap's indices). A clip without a
location (or a city label, for `city`) is a cluster of its own: nothing to tie it to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agl.errors import AglError

EARTH_RADIUS_KM = 6371.0088  # mean radius (IUGG): the chord threshold of `site:<km>`
DEFAULT_UNIT = "site:25"  # docs/metrics.md#clusters says why (params.yaml `resampling.unit`)
UNIT_HELP = "clip, cell:<degrees>, city or site:<km>"


@dataclass(frozen=True)
class Unit:
    """A parsed unit of resampling."""

    kind: str  # clip | cell | city | site
    size: float = 0.0  # degrees (cell) or km (site)
    # Pairs of clip keys that are one recording (the duplicates audit's table,
    # agl.dataset.fingerprints): their clusters are joined under any kind. Not in `name`:
    # a table without pairs changes nothing, and the unit reads the same.
    links: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.kind if self.kind in ("clip", "city") else f"{self.kind}:{self.size:g}"


def parse_unit(text: str | Unit, where: str = "resampling.unit") -> Unit:
    """`clip`, `city`, `cell:<degrees>` or `site:<km>`; anything else is one line naming `where`.
    A `Unit` (one carrying `links`) is returned as it is."""
    if isinstance(text, Unit):
        return text
    text = str(text).strip()
    kind, _, arg = text.partition(":")
    if kind in ("clip", "city") and not arg:
        return Unit(kind)
    if kind in ("cell", "site") and arg:
        try:
            size = float(arg)
        except ValueError:
            size = math.nan
        if math.isfinite(size) and size > 0 and (kind == "site" or size <= 180):
            return Unit(kind, size)
    raise AglError(f"{where}: unknown unit of resampling '{text}'; use {UNIT_HELP} "
                   "(a positive number, degrees at most 180)")


def _column(frame: pd.DataFrame, *names: str) -> np.ndarray | None:
    for name in names:
        if name in frame:
            return frame[name].to_numpy()
    return None


def _coords(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    lat = _column(frame, "true_lat", "latitude")
    lon = _column(frame, "true_lon", "longitude")
    if lat is None or lon is None:
        raise AglError("clusters need the clips' true coordinates (true_lat/true_lon or "
                       "latitude/longitude columns); give a score table or a manifest")
    lat = pd.to_numeric(pd.Series(lat), errors="coerce").to_numpy(dtype=float)
    lon = pd.to_numeric(pd.Series(lon), errors="coerce").to_numpy(dtype=float)
    return lat, lon


def _first_seen(keys: np.ndarray) -> np.ndarray:
    """Per row, the number of its key's cluster, numbered in order of first appearance
    (pandas' factorize numbers them so, by hashing: np.unique's sort is 10x slower)."""
    codes, _ = pd.factorize(np.asarray(keys))
    return codes.astype(np.int64)


def _renumber(labels: np.ndarray) -> np.ndarray:
    return _first_seen(np.asarray(labels, dtype=np.int64))


def _with_own(keys: list, missing: np.ndarray) -> np.ndarray:
    """String keys, each missing row its own key (it ties to no other clip)."""
    return np.array([f"\x00{i}" if m else k for i, (k, m) in enumerate(zip(keys, missing, strict=True))],
                    dtype=object).astype(str)


def _cells(frame: pd.DataFrame, degrees: float) -> np.ndarray:
    lat, lon = _coords(frame)
    missing = ~(np.isfinite(lat) & np.isfinite(lon))
    with np.errstate(invalid="ignore"):
        row = np.round(np.nan_to_num(lat) / degrees).astype(np.int64)
        col = np.round(np.mod(np.nan_to_num(lon) + 180.0, 360.0) / degrees).astype(np.int64)
        col = np.where(col * degrees >= 360.0, 0, col)  # 180 E and 180 W: one meridian
    return _first_seen(_with_own([f"{r},{c}" for r, c in zip(row, col, strict=True)], missing))


def _norm(values: np.ndarray | None, n: int) -> np.ndarray:
    if values is None:
        return np.full(n, "", dtype=object)
    return np.array(["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).strip().casefold()
                     for v in values], dtype=object)


def _cities(frame: pd.DataFrame) -> np.ndarray:
    n = len(frame)
    city = _norm(_column(frame, "true_city", "city"), n)
    country = _norm(_column(frame, "true_country", "country"), n)
    if _column(frame, "true_city", "city") is None:
        raise AglError("the `city` unit needs the clips' city labels (true_city or city column)")
    return _first_seen(_with_own([f"{c}\x01{k}" for c, k in zip(city, country, strict=True)], city == ""))


# Up to this many distinct points are linked by comparing every pair (blocks of rows) instead
# of scipy's KD-tree: importing scipy.sparse and scipy.spatial costs ~0.25 s of CPU in every
# process that clusters by site (evaluate@, listen@, counterfactual, report, infer@knn), and
# AGL1K has at most 1,444 points. Same pairs: the squared distance summed as the tree sums it
# (x, then y, then z), compared with r * r as the tree compares it (tests/test_clusters.py).
PAIRS_MAX = 4096


def _close_pairs(xyz: np.ndarray, r: float) -> np.ndarray:
    """(i, j), i < j, of the points no farther apart than r: `cKDTree.query_pairs(r)`."""
    if len(xyz) > PAIRS_MAX:
        from scipy.spatial import cKDTree  # scipy: a dependency; past PAIRS_MAX points only

        return cKDTree(xyz).query_pairs(r, output_type="ndarray")
    bound, found = r * r, []
    for start in range(0, len(xyz), 256):
        block = xyz[start:start + 256]
        d = block[:, None, :] - xyz[None, :, :]
        sq = d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1] + d[..., 2] * d[..., 2]
        i, j = np.nonzero(sq <= bound)
        i = i + start
        keep = i < j
        found.append(np.column_stack([i[keep], j[keep]]))
    return np.concatenate(found) if found else np.zeros((0, 2), dtype=np.int64)


def _components(m: int, pairs: np.ndarray) -> np.ndarray:
    """A label per point, equal within each connected component of the pairs' graph (the
    smallest point index in it): the partition scipy's `connected_components` gives."""
    labels = np.arange(m, dtype=np.int64)
    if not len(pairs):
        return labels
    a, b = pairs[:, 0], pairs[:, 1]
    while True:  # each pass pulls every point to its neighbours' smallest label, then jumps
        low = np.minimum(labels[a], labels[b])
        nxt = labels.copy()
        np.minimum.at(nxt, a, low)
        np.minimum.at(nxt, b, low)
        nxt = nxt[nxt]
        if np.array_equal(nxt, labels):
            return labels
        labels = nxt


def _sites(frame: pd.DataFrame, km: float) -> np.ndarray:
    """Single linkage: connected components of 'closer than km' (chord on the unit sphere)."""
    lat, lon = _coords(frame)
    ok = np.isfinite(lat) & np.isfinite(lon)
    # Clips at the same point are one cluster whatever the distance: link the distinct points
    # (a recordist's 100 clips at one spot would otherwise be 5,000 pairs).
    order = np.lexsort((lon[ok], lat[ok]))
    lat_s, lon_s = lat[ok][order], lon[ok][order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (lat_s[1:] != lat_s[:-1]) | (lon_s[1:] != lon_s[:-1])
    points = np.column_stack([lat_s[new], lon_s[new]])
    point_of = np.empty(order.size, dtype=np.int64)
    point_of[order] = np.cumsum(new) - 1
    m = len(points)
    phi, lam = np.radians(points[:, 0]), np.radians(points[:, 1])
    xyz = np.column_stack([np.cos(phi) * np.cos(lam), np.cos(phi) * np.sin(lam), np.sin(phi)])
    chord = 2.0 * math.sin(min(km / EARTH_RADIUS_KM, math.pi) / 2.0)
    point_labels = _components(m, _close_pairs(xyz, chord * (1 - 1e-12)))
    labels = np.empty(len(frame), dtype=np.int64)
    labels[ok] = point_labels[point_of.reshape(-1)]
    labels[~ok] = m + np.arange(int((~ok).sum()))  # no place: a cluster of its own
    return _renumber(labels)


def cluster_labels(frame: pd.DataFrame, unit: str | Unit) -> np.ndarray:
    """Per row of `frame` (a score table or a manifest), the number of its cluster under
    `unit`, numbered in order of first appearance (0, 1, ...)."""
    unit = unit if isinstance(unit, Unit) else parse_unit(unit)
    if unit.kind == "clip" or len(frame) == 0:
        labels = np.arange(len(frame), dtype=np.int64)
    elif unit.kind == "cell":
        labels = _cells(frame, unit.size)
    elif unit.kind == "city":
        labels = _cities(frame)
    else:
        labels = _sites(frame, unit.size)
    keys = _column(frame, "sample_id", "key")
    return join(labels, keys, unit.links) if unit.links and keys is not None else labels


def join(labels: np.ndarray, keys, pairs) -> np.ndarray:
    """`labels` with the clusters of every linked pair of keys made one (the duplicates audit's
    pairs: two copies of one recording are one cluster under every unit), renumbered in order
    of first appearance. Keys a pair names that are not among `keys` are ignored."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    at = {str(k): i for i, k in enumerate(keys)}
    parent = {int(x): int(x) for x in np.unique(labels)}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        if str(a) in at and str(b) in at:
            ra, rb = find(int(labels[at[str(a)]])), find(int(labels[at[str(b)]]))
            parent[max(ra, rb)] = min(ra, rb)
    return _renumber(np.array([find(int(x)) for x in labels], dtype=np.int64))


def n_clusters(labels: np.ndarray | None, n: int) -> int:
    """How many clusters `labels` name (n when there are none: every clip its own)."""
    return n if labels is None else int(np.unique(labels).size)


def subset(labels: np.ndarray | None, mask) -> np.ndarray | None:
    """The labels of some rows, renumbered in their order (None stays None)."""
    return None if labels is None else _renumber(np.asarray(labels)[mask])
