"""Geodesic distances on the WGS-84 ellipsoid, vectorised (pyproj), NaN-safe."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

EARTH_MAX_KM = 20003.93  # the longest geodesic on WGS-84: half the meridional circumference
# The paper's GeoScore, 5000·exp(-d/1492) (params.yaml evaluate.geoscore_km); OSV-5M's
# 1492.7 (GeoGuessr's) is the documented alternative: 1317.7 against the paper's 1317.5 for
# Qwen2.5-Omni, beyond the printed precision (docs/metrics.md#geoscore).
GEOSCORE_SCALE_KM = 1492.0
OSV5M_GEOSCORE_KM = 1492.7

# Rows per thread below which splitting the work costs more than it saves.
_ROWS_PER_THREAD = 200_000

_GEOD = None


def _geod():
    global _GEOD
    if _GEOD is None:
        from pyproj import Geod

        _GEOD = Geod(ellps="WGS84")
    return _GEOD


def geodesic_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Distance in km between arrays of points (degrees). Rows with a NaN give NaN."""
    return geodesic_km_later(lat1, lon1, lat2, lon2)()


def geodesic_km_later(lat1, lon1, lat2, lon2) -> Callable[[], np.ndarray]:
    """`geodesic_km`, started now; calling the returned function waits for the distances.

    A large array is computed in worker threads, split across the CPUs: pyproj releases
    the GIL in its loop over the points, so the pieces run in parallel, and the caller's
    own work (text normalisation, in Python) runs meanwhile. Every row is computed on its
    own, so the pieces together are exactly the one-call result.
    """
    lat1, lon1, lat2, lon2 = (np.asarray(a, dtype=float) for a in (lat1, lon1, lat2, lon2))
    lat1, lon1, lat2, lon2 = np.broadcast_arrays(lat1, lon1, lat2, lon2)
    out = np.full(lat1.shape, np.nan)
    ok = np.isfinite(lat1) & np.isfinite(lon1) & np.isfinite(lat2) & np.isfinite(lon2)
    n = int(ok.sum())
    if n == 0:
        return lambda: out
    points = [a[ok] for a in (lon1, lat1, lon2, lat2)]
    geod = _geod()  # made here, never by two threads at once
    threads = min(usable_cpus(), n // _ROWS_PER_THREAD)
    if threads < 1:  # small: a thread would cost more than it saves
        out[ok] = _inverse_metres(geod, *points) / 1000.0
        return lambda: out
    edges = np.linspace(0, n, threads + 1).astype(int)
    pool = ThreadPoolExecutor(threads)
    pieces = [pool.submit(_inverse_metres, geod, *(a[edges[i]:edges[i + 1]] for a in points))
              for i in range(threads)]
    pool.shutdown(wait=False)  # the threads end once their piece is done

    def distances() -> np.ndarray:
        out[ok] = np.concatenate([piece.result() for piece in pieces]) / 1000.0
        return out

    return distances


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _inverse_metres(geod, lon1: np.ndarray, lat1: np.ndarray, lon2: np.ndarray,
                    lat2: np.ndarray) -> np.ndarray:
    return np.asarray(geod.inv(lon1, lat1, lon2, lat2)[2])


def geoscore(distance_km, scale_km: float = GEOSCORE_SCALE_KM) -> np.ndarray:
    """The GeoScore of a distance error: 5000·exp(-d / scale_km), the paper's 1492 km by default."""
    return 5000.0 * np.exp(-np.asarray(distance_km, dtype=float) / scale_km)
