"""Small factories for manifests and predictions used across tests."""

from __future__ import annotations

import pandas as pd

from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.predictions.records import Prediction, Status


def manifest(rows: list[dict]) -> pd.DataFrame:
    """A validated-looking manifest frame from a few dicts (key, latitude, longitude, ...)."""
    out = []
    for i, r in enumerate(rows):
        base = {"key": f"k{i}", "mp3name": f"c{i}.mp3", "mp3seconds": 30.0, "city": "Paris",
                "country": "France", "continent": "Europe", "latitude": 48.8566, "longitude": 2.3522}
        base.update({c: 0.0 for c in CATEGORY_COLUMNS})
        base["environment_and_background"] = 1.0
        base.update(r)
        out.append(base)
    return pd.DataFrame(out)


def prediction(sample_id: str, lat=None, lon=None, city=None, country=None, continent=None,
               status: Status | None = None, **kw) -> Prediction:
    fields = dict(latitude=lat, longitude=lon, city=city, country=country, continent=continent)
    if status is None:
        missing = tuple(k for k, v in fields.items() if v is None)
        status = Status.OK if not missing else Status.PARTIAL
        kw.setdefault("missing", missing)
    return Prediction(sample_id, status, **fields, **kw)
