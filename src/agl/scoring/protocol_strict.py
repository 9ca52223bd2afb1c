"""The `strict` scoring protocol: every clip of the manifest, nothing out of the denominator.

The rules are listed in `agl.scoring.protocols`; countries are compared as ISO 3166 alpha-3
codes (country_converter, imported on first use), continents and cities by folded names.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import numpy as np
import pandas as pd

from agl.core.countries import converter
from agl.core.geo import EARTH_MAX_KM, geodesic_km
from agl.scoring.score_table import FAILED_STATUSES, SCORE_COLUMNS, is_missing, join_truth, map_unique

_ISO3_CACHE: dict[str, str | None] = {}
_CONTINENT_CACHE: dict[str, str | None] = {}


def iso3_many(names) -> dict[str, str | None]:
    """ISO 3166 alpha-3 codes of country names (None if unknown); Taiwan counts as China.

    One batched country_converter call for the names not seen before: converting name by
    name is ~100x slower.
    """
    todo = sorted({str(n).strip() for n in names if not is_missing(n) and str(n).strip()}
                  - set(_ISO3_CACHE))
    if todo:
        codes = converter().convert(todo, to="ISO3", not_found=None)
        codes = codes if isinstance(codes, list) and len(todo) > 1 else [codes]
        for name, code in zip(todo, codes, strict=True):
            code = None if isinstance(code, list) else code  # ambiguous: several countries
            _ISO3_CACHE[name] = "CHN" if code == "TWN" else code
    return _ISO3_CACHE


def iso3(name: str | None) -> str | None:
    """One country name's ISO 3166 alpha-3 code (`iso3_many`), or None."""
    if is_missing(name) or not str(name).strip():
        return None
    return iso3_many([name]).get(str(name).strip())


def continent_of_iso3(code: str | None) -> str | None:
    """The continent of an ISO alpha-3 code (country_converter's 7; Antarctica: None)."""
    if not code:
        return None
    if code not in _CONTINENT_CACHE:
        cont = converter().convert(code, src="ISO3", to="continent_7", not_found=None)
        _CONTINENT_CACHE[code] = (
            None if not isinstance(cont, str) or cont == "Antarctica" else cont
        )
    return _CONTINENT_CACHE[code]


def _iso3_series(series: pd.Series) -> pd.Series:
    table = iso3_many(pd.unique(series.astype(object)))
    return series.astype(object).map(
        lambda n: None if is_missing(n) or not str(n).strip() else table.get(str(n).strip())
    )


@lru_cache(maxsize=10_000)
def strict_continent(name: str | None) -> str | None:
    """A continent name trimmed, case-folded, without a leading "the", Australia as Oceania."""
    if is_missing(name) or not str(name).strip():
        return None
    s = " ".join(str(name).strip().casefold().split())
    if s.startswith("the "):
        s = s[4:]
    s = {"australia": "oceania", "australasia": "oceania"}.get(s, s)
    return s.title()


@lru_cache(maxsize=100_000)
def fold_city(name: str | None) -> str | None:
    """A city name case-folded with accents removed and spaces collapsed."""
    if is_missing(name) or not str(name).strip():
        return None
    text = unicodedata.normalize("NFKD", str(name).strip().casefold())
    return " ".join("".join(c for c in text if not unicodedata.combining(c)).split())


def score_strict(
    manifest: pd.DataFrame, preds: pd.DataFrame, *, strict_refusal_km: float = EARTH_MAX_KM
) -> tuple[pd.DataFrame, dict]:
    """The `strict` protocol (see `agl.scoring.protocols`): every clip of the manifest
    scored, nothing left out of the denominator; the score table and its notes."""
    f = join_truth(manifest, preds, how="left_manifest")
    notes = {"protocol": "strict", "n_without_prediction": int((f["status"] == "missing").sum())}
    # A reply cut at the output limit is no answer here: a failure, whatever it got to say.
    answered = ~f["status"].isin(("refused", *FAILED_STATUSES, "truncated")).to_numpy()
    lat, lon = f["pred_lat"].to_numpy(float), f["pred_lon"].to_numpy(float)
    # An answer whose coordinate is off the globe (latitude 91 or 1e300, longitude 540) is
    # a failure at the refusal distance: never left out of the mean, never wrapped.
    with np.errstate(invalid="ignore"):
        bad_lat = ~np.isnan(lat) & ~(np.abs(lat) <= 90)
        bad_lon = ~np.isnan(lon) & ~(np.abs(lon) <= 180)
    invalid_xy = answered & (bad_lat | bad_lon)
    notes["n_invalid_coordinates"] = int(invalid_xy.sum())
    answered = answered & ~invalid_xy
    has_xy = answered & np.isfinite(lat) & np.isfinite(lon)
    dist = geodesic_km(f["true_lat"], f["true_lon"], np.where(has_xy, lat, np.nan),
                       np.where(has_xy, lon, np.nan))
    dist = np.where(has_xy, dist, strict_refusal_km)
    true_iso = _iso3_series(f["true_country"])
    pred_iso = _iso3_series(f["pred_country"])
    true_cont = map_unique(f["true_continent"], strict_continent)
    derived = map_unique(true_iso, continent_of_iso3)
    true_cont = true_cont.where(true_cont.notna(), derived)
    pred_cont = map_unique(f["pred_continent"], strict_continent)
    true_city, pred_city = map_unique(f["true_city"], fold_city), map_unique(f["pred_city"], fold_city)

    def correct(true: pd.Series, pred: pd.Series) -> np.ndarray:
        eq = (true.notna() & pred.notna() & (true.astype(str) == pred.astype(str))).to_numpy()
        return (eq & answered).astype(float)

    out = f.assign(
        pred_lat=np.where(has_xy, lat, np.nan), pred_lon=np.where(has_xy, lon, np.nan),
        distance_km=dist,
        refused=(f["refused"].to_numpy(bool) | (f["status"] == "refused").to_numpy()),
        failed=f["status"].isin((*FAILED_STATUSES, "truncated")).to_numpy() | invalid_xy,
        true_country=true_iso, pred_country=pred_iso, true_continent=true_cont,
        pred_continent=pred_cont, true_city=true_city, pred_city=pred_city,
    )
    out["city_correct"] = correct(true_city, pred_city)
    out["country_correct"] = correct(true_iso, pred_iso)
    out["continent_correct"] = correct(true_cont, pred_cont)
    return out[list(SCORE_COLUMNS)], notes
