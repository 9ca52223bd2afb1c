"""Geodesic distances on the WGS-84 ellipsoid, vectorised (pyproj), NaN-safe."""

from __future__ import annotations

import numpy as np

EARTH_MAX_KM = 20003.93  # the longest geodesic on WGS-84: half the meridional circumference
GEOSCORE_SCALE_KM = 1492.7  # GeoGuessr's score 5000·exp(-d/1492.7), as OSV-5M uses it

_GEOD = None


def _geod():
    global _GEOD
    if _GEOD is None:
        from pyproj import Geod

        _GEOD = Geod(ellps="WGS84")
    return _GEOD


def geodesic_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Distance in km between arrays of points (degrees). Rows with a NaN give NaN."""
    lat1, lon1, lat2, lon2 = (np.asarray(a, dtype=float) for a in (lat1, lon1, lat2, lon2))
    lat1, lon1, lat2, lon2 = np.broadcast_arrays(lat1, lon1, lat2, lon2)
    out = np.full(lat1.shape, np.nan)
    ok = np.isfinite(lat1) & np.isfinite(lon1) & np.isfinite(lat2) & np.isfinite(lon2)
    if ok.any():
        _, _, metres = _geod().inv(lon1[ok], lat1[ok], lon2[ok], lat2[ok])
        out[ok] = np.asarray(metres) / 1000.0
    return out


def geoscore(distance_km) -> np.ndarray:
    return 5000.0 * np.exp(-np.asarray(distance_km, dtype=float) / GEOSCORE_SCALE_KM)
