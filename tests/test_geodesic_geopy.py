"""The vectorised geodesic (pyproj) against geopy's, the one the paper's scorer called row by
row: 10,000+ random pairs, antipodal and near-antipodal pairs, pairs at and near the poles."""

from __future__ import annotations

import numpy as np
from geopy.distance import geodesic

from agl.core.geo import geodesic_km


def _pairs(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = 10_000
    # Uniform on the sphere, so high latitudes get their share.
    lat1 = np.degrees(np.arcsin(rng.uniform(-1, 1, n)))
    lat2 = np.degrees(np.arcsin(rng.uniform(-1, 1, n)))
    lon1, lon2 = rng.uniform(-180, 180, n), rng.uniform(-180, 180, n)
    random = np.column_stack([lat1, lon1, lat2, lon2])
    m = 200
    a_lat, a_lon = rng.uniform(-89, 89, m), rng.uniform(-180, 180, m)
    antipodal = np.column_stack([a_lat, a_lon, -a_lat, (a_lon + 360) % 360 - 180])
    jitter = rng.normal(0, 0.05, (m, 2))  # nearly antipodal: the hardest case to converge
    near_antipodal = antipodal + np.column_stack([np.zeros((m, 2)), jitter])
    near_antipodal[:, 2] = np.clip(near_antipodal[:, 2], -90, 90)
    p_lat = rng.choice([-1, 1], m) * rng.uniform(89.9, 90.0, m)
    poles = np.column_stack(
        [p_lat, rng.uniform(-180, 180, m), np.degrees(np.arcsin(rng.uniform(-1, 1, m))), rng.uniform(-180, 180, m)]
    )
    fixed = np.array(
        [
            [90, 0, -90, 0],
            [90, 10, 90, -170],
            [-90, 0, -89.999, 45],
            [0, 0, 0, 180],
            [0, 0, 0.5, 179.5],
            [45, 179.999, 45, -179.999],
            [10, 20, 10, 20],
            [89.9999, 0, -89.9999, 180],
        ],
        dtype=float,
    )
    return np.vstack([random, antipodal, near_antipodal, poles, fixed])


def test_vectorised_geodesic_agrees_with_geopy_within_a_metre():
    pairs = _pairs()
    assert len(pairs) >= 10_000
    ours = geodesic_km(pairs[:, 0], pairs[:, 1], pairs[:, 2], pairs[:, 3])
    theirs = np.array([geodesic((a, b), (c, d)).kilometers for a, b, c, d in pairs])
    diff_m = np.abs(ours - theirs) * 1000
    worst = int(np.argmax(diff_m))
    assert diff_m.max() <= 1.0, f"pair {pairs[worst].tolist()}: {ours[worst]} vs {theirs[worst]} km"
    assert np.isfinite(ours).all()
