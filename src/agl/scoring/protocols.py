"""Scoring protocols: turn (manifest, predictions) into a per-clip score table.

`paper` reproduces the authors' released analysis exactly (see ../shared/README.md):
  * rows: the clips that have a prediction; clips whose eight category columns are all 0
    are dropped, as the authors' filter does (none in AGL1K; the count is reported);
  * each of the five predicted fields is read as the authors' pipeline wrote it (the
    `original` strings of an imported file; for this project's runs a missing field is
    written "Unknown", which is what the authors' pipeline wrote for failures);
  * a refused coordinate (NaN, '', 0, 0.0, -1, null, none, n/a, na, unknown, unable, cannot)
    scores 10,000 km; a coordinate that is present but not a number, or a latitude outside
    [-90, 90], is excluded from the distance metrics (the authors' geodesic raised and they
    averaged with NaN skipped); a longitude outside [-180, 180] is wrapped, as geopy does;
  * accuracies compare lower-cased strings after the authors' country/continent name
    normalisation, over the rows where both sides are present after normalisation;
  * reject rate: any of the five fields is a refusal; thresholds are strict `<` over the
    scored distances; a clip "has speech" when `human_sounds >= 0.1`.

`strict` scores every clip of the manifest and lets nothing out of the denominator:
  * a clip without a prediction, a failure, an unparseable reply or a refusal is wrong at
    every level and its distance is `strict_refusal_km` (default: the longest geodesic on
    Earth, 20,003.93 km, so a refusal can never beat a guess);
  * a predicted coordinate off the globe (|latitude| > 90, |longitude| > 180, infinite;
    e.g. 91, 1e300, 540) fails the clip the same way: counted (`failed`, and
    `n_invalid_coordinates` in the notes), never left out of the mean, never wrapped.
    `paper` keeps the authors' behaviour for these (above: an out-of-range latitude is left
    out of the distance metrics, a longitude is wrapped);
  * countries are compared as ISO 3166 alpha-3 codes (country_converter), Taiwan mapped to
    China on both sides as the dataset itself labels it;
  * the true continent comes from the manifest, or from the country where it is empty
    (AGL1K's six Vatican City rows); continents are compared by name after trimming,
    case-folding, dropping "the" and mapping Australia to Oceania; a hedge ("Europe or
    Asia") is wrong;
  * cities are compared case-folded with accents removed.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from agl.core.geo import EARTH_MAX_KM, geodesic_km, geodesic_km_later
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError

PAPER_REFUSAL_KM = 10_000.0
PAPER_REFUSALS = frozenset(
    ["0", "-1", "", "null", "none", "n/a", "na", "unknown", "unable", "cannot", "0.0"]
)
SPEECH_THRESHOLD = 0.1
SCORE_COLUMNS = (
    "sample_id", "status", *CATEGORY_COLUMNS, "has_speech", "true_lat", "true_lon",
    "pred_lat", "pred_lon", "distance_km", "city_correct", "country_correct",
    "continent_correct", "refused", "failed", "true_city", "true_country", "true_continent",
    "pred_city", "pred_country", "pred_continent", "confidence",
)
FAILED_STATUSES = ("failed", "unparseable", "missing")
_TEXT_FIELDS = ("city", "country", "continent")

# --- the authors' name normalisation, re-expressed as data ----------------------------------
# canonical name -> variants (lower case, after removing ',', '.', ';' and a leading "the ").
_PAPER_COUNTRY_VARIANTS: dict[str, tuple[str, ...]] = {
    "United States": ("usa", "us", "united states", "united states of america", "america"),
    "United Kingdom": ("united kingdom", "uk", "great britain", "britain", "england"),
    "Netherlands": ("netherlands", "holland"),
    "Czechia": ("czechia", "czech republic", "czech"),
    "Turkey": ("turkey", "türkiye", "turkiye"),
    "Russia": ("russia", "russian federation"),
    "South Korea": ("south korea", "korea", "republic of korea", "s korea"),
    "North Korea": ("north korea", "democratic people's republic of korea", "dprk", "n korea"),
    "China": ("china", "people's republic of china", "prc", "mainland china"),
    "Japan": ("japan", "nippon"),
    "Germany": ("germany", "deutschland", "federal republic of germany"),
    "France": ("france", "french republic"),
    "Italy": ("italy", "italia"),
    "Spain": ("spain", "españa", "espana"),
    "Brazil": ("brazil", "brasil"),
    "Mexico": ("mexico", "méxico"),
    "India": ("india", "bharat"),
    "Peru": ("peru", "perú"),
    "Greece": ("greece", "hellas"),
    "Switzerland": ("switzerland", "suisse", "schweiz"),
    "Austria": ("austria", "österreich", "osterreich"),
    "Sweden": ("sweden", "sverige"),
    "Norway": ("norway", "norge"),
    "Denmark": ("denmark", "danmark"),
    "Finland": ("finland", "suomi"),
    "Poland": ("poland", "polska"),
    "Hungary": ("hungary", "magyarország", "magyarorszag"),
    "Romania": ("romania", "românia"),
    "Belarus": ("belarus", "belorussia"),
    "Iran": ("iran", "islamic republic of iran"),
    "Egypt": ("egypt", "arab republic of egypt"),
    "Thailand": ("thailand", "siam"),
    "Vietnam": ("vietnam", "viet nam"),
    "Ireland": ("ireland", "éire", "eire"),
    "Luxembourg": ("luxembourg", "luxemburg"),
}
_PAPER_COUNTRY = {v: k for k, vs in _PAPER_COUNTRY_VARIANTS.items() for v in vs}


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


@lru_cache(maxsize=100_000)
def paper_country(name: str | None) -> str | None:
    """The authors' country normalisation (reproduced for exact scores)."""
    if _missing(name) or str(name).strip() == "":
        return None
    s = str(name).strip()
    low = s.lower()
    if "taiwan" in low:
        return "China"
    if low.startswith("the "):
        low = low[4:].strip()
    key = low.replace(",", "").replace(".", "").replace(";", "").strip()
    if key in _PAPER_COUNTRY:
        return _PAPER_COUNTRY[key]
    if s.lower().startswith("the "):
        return "The " + s[4:].strip().title()
    return s.title()


@lru_cache(maxsize=10_000)
def paper_continent(name: str | None) -> str | None:
    """The authors' continent normalisation (a leading "the" is, as in theirs, not removed)."""
    if _missing(name) or str(name).strip() == "":
        return None
    s = str(name).strip()
    if "arctic" in s.lower():
        return "Antarctica"
    out = s.lower().title()
    return "Oceania" if out == "Australia" else out


def _is_refusal_word(value) -> bool:
    """The authors' test: the value, as text, stripped and lower-cased, is a refusal word."""
    return _missing(value) or str(value).strip().lower() in PAPER_REFUSALS


def _paper_refusal(values: pd.Series) -> np.ndarray:
    """`_is_refusal_word` of every value, tested once per distinct value."""
    if pd.api.types.is_float_dtype(values):
        return (values.isna() | (values == 0.0)).to_numpy()  # str(0.0) == "0.0"
    objects = values.to_numpy(dtype=object)
    # Published coordinates are mostly Python floats, nearly all distinct: test them as an
    # array. For a float the authors' test is NaN, or str() == "0.0" (so 0.0 but not -0.0).
    floats = np.fromiter((type(v) is float for v in objects), dtype=bool, count=len(objects))
    flags = np.zeros(len(objects), dtype=bool)
    if floats.any():
        x = objects[floats].astype(float)
        flags[floats] = np.isnan(x) | ((x == 0.0) & ~np.signbit(x))
    rest = ~floats
    if rest.any():
        others = objects[rest]
        codes, uniques = pd.factorize(others, use_na_sentinel=True)
        part = np.array([_is_refusal_word(u) for u in uniques] + [True], dtype=bool)[codes]
        missing = codes < 0
        if missing.any():  # factorize merges None, NaN and pd.NA; each keeps its own answer
            part[missing] = [_is_refusal_word(v) for v in others[missing]]
        flags[rest] = part
    return flags


@dataclass(frozen=True)
class _Distinct:
    """A text column as its distinct values and, per row, the position of its value.

    Per-value work (normalising, lower-casing, testing for refusals) then runs once per
    distinct value instead of once per row: a run names a few hundred places over a
    million rows, and one hash pass per column replaces one per operation.
    """

    values: np.ndarray  # object: the distinct values, then the value of the missing rows
    index: np.ndarray  # per row; -1 (the last value) where the column is missing

    @classmethod
    def of(cls, column, missing: object = None) -> _Distinct:
        """`column`'s values (None, NaN, pd.NA count as missing and read as `missing`)."""
        codes, uniques = pd.factorize(np.asarray(column, dtype=object), use_na_sentinel=True)
        values = np.empty(len(uniques) + 1, dtype=object)
        values[:-1] = uniques
        values[-1] = missing
        return cls(values, codes)

    def map(self, fn: Callable) -> _Distinct:
        values = np.fromiter((fn(v) for v in self.values), dtype=object, count=len(self.values))
        return _Distinct(values, self.index)

    def rows(self) -> np.ndarray:
        return self.values[self.index]

    def test(self, fn: Callable[[object], bool]) -> np.ndarray:
        """`fn` of every row's value, as booleans (a boolean take: no object array)."""
        flags = np.fromiter((bool(fn(v)) for v in self.values), dtype=bool, count=len(self.values))
        return flags[self.index]


def _lower_match(a: _Distinct, b: _Distinct) -> np.ndarray:
    """1.0 where the two columns' lower-cased texts are equal, 0.0 where they differ, NaN
    where either is missing."""
    words = [None if _missing(v) else str(v).lower() for v in (*a.values, *b.values)]
    joint, _ = pd.factorize(np.array(words, dtype=object), use_na_sentinel=True)
    ja, jb = joint[: len(a.values)][a.index], joint[len(a.values):][b.index]
    return np.where((ja >= 0) & (jb >= 0), (ja == jb).astype(float), np.nan)


def _map_unique(series: pd.Series, fn: Callable) -> pd.Series:
    """`fn` applied to each distinct value only (a run has few distinct names)."""
    codes, uniques = pd.factorize(series.astype(object), use_na_sentinel=True)
    mapped = np.array([fn(u) for u in uniques] + [fn(None)], dtype=object)
    return pd.Series(mapped[codes], index=series.index)  # code -1 takes fn(None), the last


# --- joining --------------------------------------------------------------------------------


def _join(manifest: pd.DataFrame, preds: pd.DataFrame, how: str) -> pd.DataFrame:
    """The manifest's truth beside the predictions, one row per clip scored. With
    how="inner" the predictions' columns are their own arrays, not copies: never written
    into here, and copied by a caller that hands them out."""
    keys = pd.Index(manifest["key"])
    pos = keys.get_indexer(preds["sample_id"])
    if (pos < 0).any():
        unknown = preds["sample_id"][pos < 0]
        raise AglError(
            f"{len(unknown)} prediction(s) name clips not in the manifest "
            f"(e.g. {', '.join(map(str, unknown.head(3)))}); evaluate against the manifest they "
            "were run on"
        )
    truth = {"sample_id": "key", "true_lat": "latitude", "true_lon": "longitude",
             "true_city": "city", "true_country": "country", "true_continent": "continent",
             **{c: c for c in CATEGORY_COLUMNS}}
    ours = {"status": "status", "pred_lat": "latitude", "pred_lon": "longitude",
            "pred_city": "city", "pred_country": "country", "pred_continent": "continent",
            "confidence": "confidence", "refused": "refused", "original": "original"}
    if how == "left_manifest":  # every clip; the ones without a prediction are "missing"
        rows = np.full(len(manifest), -1)
        rows[pos] = np.arange(len(preds))
        have = rows >= 0
        cols = {k: manifest[v].to_numpy() for k, v in truth.items()}
        for k, v in ours.items():
            src = preds[v].to_numpy()
            col = np.empty(len(manifest), dtype=src.dtype if src.dtype.kind == "f" else object)
            col[:] = np.nan if src.dtype.kind == "f" else None
            col[have] = src[rows[have]]
            cols[k] = col
        joined = pd.DataFrame(cols, copy=False)  # copy=False: no consolidating copy of 1M rows
        joined["status"] = joined["status"].where(have, "missing")
        joined["refused"] = np.where(have, joined["refused"], False).astype(bool)
    else:
        cols = {k: manifest[v].to_numpy()[pos] for k, v in truth.items()}
        cols.update({k: preds[v].to_numpy() for k, v in ours.items()})
        joined = pd.DataFrame(cols, copy=False)
    joined["has_speech"] = joined["human_sounds"] >= SPEECH_THRESHOLD
    return joined


# --- paper -----------------------------------------------------------------------------------


class _PaperViews:
    """The fields as the authors' pipeline would have written them: a row's own published
    field (`original`) where it has one, else ours with a missing value read "Unknown".
    Which rows have an `original` is found once for all five fields."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        originals = frame["original"].to_numpy()
        # One pass in a generator: Series.map with a lambda is ~10x slower on 1M rows.
        self.has = np.fromiter((isinstance(o, dict) for o in originals), dtype=bool,
                               count=len(originals))
        self.originals = originals[self.has]

    def view(self, field: str, ours: str) -> pd.Series:
        frame, orig_key = self.frame, f"predicted_{field}"
        values = frame[ours].astype(object).where(frame[ours].notna(), "Unknown").to_numpy(copy=True)
        if len(self.originals):
            values[self.has] = np.fromiter((o.get(orig_key) for o in self.originals),
                                           dtype=object, count=len(self.originals))
        return pd.Series(values, index=frame.index, dtype=object)


def _paper_texts(f: pd.DataFrame, original: _PaperViews | None) -> tuple[dict, dict, dict, dict]:
    """The three text fields as the authors' pipeline wrote them (`views`), their distinct
    values (`texts`), which rows are refusals, and where this run gave no value (`absent`)."""
    if original is not None:
        views = {name: original.view(name, f"pred_{name}").to_numpy() for name in _TEXT_FIELDS}
        texts = {name: _Distinct.of(view) for name, view in views.items()}
        refusals = {name: _paper_refusal(pd.Series(view)) for name, view in views.items()}
        absent = {name: f[f"pred_{name}"].isna().to_numpy() for name in _TEXT_FIELDS}
    else:
        # A missing field reads "Unknown", as the authors' pipeline wrote failures.
        texts = {name: _Distinct.of(f[f"pred_{name}"], missing="Unknown") for name in _TEXT_FIELDS}
        views = {name: d.rows() for name, d in texts.items()}
        refusals = {name: d.test(_is_refusal_word) for name, d in texts.items()}
        absent = {name: d.index < 0 for name, d in texts.items()}
    return texts, views, refusals, absent


def score_paper(manifest: pd.DataFrame, preds: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    joined = _join(manifest, preds, how="inner")
    tagged = np.any([joined[c].to_numpy() != 0 for c in CATEGORY_COLUMNS], axis=0)
    notes = {"protocol": "paper", "n_untagged_dropped": int((~tagged).sum())}
    f = joined if tagged.all() else joined[tagged].reset_index(drop=True)
    status = _Distinct.of(f["status"])
    has_original = f["original"].notna().to_numpy()
    original = _PaperViews(f) if has_original.any() else None
    if original is not None:
        lat_v, lon_v = original.view("latitude", "pred_lat"), original.view("longitude", "pred_lon")
    else:  # fast path: this project's own predictions (a missing coordinate is a refusal)
        lat_v, lon_v = f["pred_lat"], f["pred_lon"]
    ref_lat, ref_lon = _paper_refusal(lat_v), _paper_refusal(lon_v)
    lat = pd.to_numeric(lat_v.where(~ref_lat), errors="coerce").to_numpy(dtype=float)
    lon = pd.to_numeric(lon_v.where(~ref_lon), errors="coerce").to_numpy(dtype=float)
    lat = np.where(np.abs(lat) <= 90, lat, np.nan)
    lon = np.where(np.isfinite(lon), (lon + 180.0) % 360.0 - 180.0, np.nan)
    raw_lon = pd.to_numeric(lon_v, errors="coerce").to_numpy(dtype=float)
    lon = np.where(np.isfinite(lon) & (lon == -180.0) & (raw_lon == 180.0), 180.0, lon)
    # The distances are computed in threads while the text fields are scored below.
    distances = geodesic_km_later(f["true_lat"], f["true_lon"], lat, lon)
    texts, views, text_refusals, absent = _paper_texts(f, original)
    # A field a run never attempts (a coordinates-only baseline has no city, country or
    # continent) is not applicable: not a refusal, and its accuracy is undefined (shown "—").
    na = _not_attempted(status, has_original, absent)
    if na:
        notes["not_applicable"] = sorted(na)
    refused = ref_lat | ref_lon
    for name in _TEXT_FIELDS:
        if name not in na:
            refused = refused | text_refusals[name]

    pred_country = texts["country"].map(paper_country)
    pred_continent = texts["continent"].map(paper_continent)
    true_city = _Distinct.of(f["true_city"])
    true_country = _Distinct.of(f["true_country"]).map(paper_country)
    true_continent = _Distinct.of(f["true_continent"]).map(paper_continent)
    compared = {"city": (true_city, texts["city"]), "country": (true_country, pred_country),
                "continent": (true_continent, pred_continent)}
    cols = {c: f[c].to_numpy() for c in SCORE_COLUMNS if c in f.columns}
    # The join passes these two through as the predictions' own arrays: the score table
    # gets copies, so it never shares memory with the caller's frame.
    cols.update(status=cols["status"].copy(), confidence=cols["confidence"].copy())
    for name in _TEXT_FIELDS:
        cols[f"{name}_correct"] = (np.full(len(f), np.nan) if name in na
                                   else _lower_match(*compared[name]))
    dist = np.where(ref_lat | ref_lon, PAPER_REFUSAL_KM, distances())
    cols.update(
        pred_lat=lat, pred_lon=lon, distance_km=dist, refused=refused,
        failed=status.test(lambda s: s in FAILED_STATUSES),
        pred_city=views["city"], pred_country=pred_country.rows(),
        pred_continent=pred_continent.rows(), true_country=true_country.rows(),
        true_continent=true_continent.rows(),
    )
    # copy=False: the columns are the table's own arrays; consolidating them into 2-D
    # blocks would copy every one of them once more (~0.7 s on a million rows).
    return pd.DataFrame({c: cols[c] for c in SCORE_COLUMNS}, copy=False), notes


def _not_attempted(status: _Distinct, has_original: np.ndarray,
                   absent: dict[str, np.ndarray]) -> set[str]:
    """Text fields that this project's run gave in none of its answered (ok/partial) rows,
    while it answered some: the run does not attempt them. A run that refuses everything
    attempts every field (its refusals count); an authors' file always has all five."""
    answered = status.test(lambda s: s in ("ok", "partial")) & ~has_original
    if not answered.any():
        return set()
    return {name for name in _TEXT_FIELDS if absent[name][answered].all()}


# --- strict ----------------------------------------------------------------------------------


_ISO3_CACHE: dict[str, str | None] = {}
_CONTINENT_CACHE: dict[str, str | None] = {}


def _converter():
    import logging

    import country_converter as coco

    logging.getLogger("country_converter").setLevel(logging.ERROR)
    global _COCO
    if _COCO is None:
        _COCO = coco.CountryConverter()
    return _COCO


_COCO = None


def iso3_many(names) -> dict[str, str | None]:
    """ISO 3166 alpha-3 codes of country names (None if unknown); Taiwan counts as China.

    One batched country_converter call for the names not seen before: converting name by
    name is ~100x slower.
    """
    todo = sorted({str(n).strip() for n in names if not _missing(n) and str(n).strip()}
                  - set(_ISO3_CACHE))
    if todo:
        codes = _converter().convert(todo, to="ISO3", not_found=None)
        codes = codes if isinstance(codes, list) and len(todo) > 1 else [codes]
        for name, code in zip(todo, codes, strict=True):
            code = None if isinstance(code, list) else code  # ambiguous: several countries
            _ISO3_CACHE[name] = "CHN" if code == "TWN" else code
    return _ISO3_CACHE


def iso3(name: str | None) -> str | None:
    if _missing(name) or not str(name).strip():
        return None
    return iso3_many([name]).get(str(name).strip())


def continent_of_iso3(code: str | None) -> str | None:
    if not code:
        return None
    if code not in _CONTINENT_CACHE:
        cont = _converter().convert(code, src="ISO3", to="continent_7", not_found=None)
        _CONTINENT_CACHE[code] = (
            None if not isinstance(cont, str) or cont == "Antarctica" else cont
        )
    return _CONTINENT_CACHE[code]


def _iso3_series(series: pd.Series) -> pd.Series:
    table = iso3_many(pd.unique(series.astype(object)))
    return series.astype(object).map(
        lambda n: None if _missing(n) or not str(n).strip() else table.get(str(n).strip())
    )


@lru_cache(maxsize=10_000)
def strict_continent(name: str | None) -> str | None:
    if _missing(name) or not str(name).strip():
        return None
    s = " ".join(str(name).strip().casefold().split())
    if s.startswith("the "):
        s = s[4:]
    s = {"australia": "oceania", "australasia": "oceania"}.get(s, s)
    return s.title()


@lru_cache(maxsize=100_000)
def fold_city(name: str | None) -> str | None:
    if _missing(name) or not str(name).strip():
        return None
    text = unicodedata.normalize("NFKD", str(name).strip().casefold())
    return " ".join("".join(c for c in text if not unicodedata.combining(c)).split())


def score_strict(
    manifest: pd.DataFrame, preds: pd.DataFrame, *, strict_refusal_km: float = EARTH_MAX_KM
) -> tuple[pd.DataFrame, dict]:
    f = _join(manifest, preds, how="left_manifest")
    notes = {"protocol": "strict", "n_without_prediction": int((f["status"] == "missing").sum())}
    answered = ~f["status"].isin(("refused", *FAILED_STATUSES)).to_numpy()
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
    true_cont = _map_unique(f["true_continent"], strict_continent)
    derived = _map_unique(true_iso, continent_of_iso3)
    true_cont = true_cont.where(true_cont.notna(), derived)
    pred_cont = _map_unique(f["pred_continent"], strict_continent)
    true_city, pred_city = _map_unique(f["true_city"], fold_city), _map_unique(f["pred_city"], fold_city)

    def correct(true: pd.Series, pred: pd.Series) -> np.ndarray:
        eq = (true.notna() & pred.notna() & (true.astype(str) == pred.astype(str))).to_numpy()
        return (eq & answered).astype(float)

    out = f.assign(
        pred_lat=np.where(has_xy, lat, np.nan), pred_lon=np.where(has_xy, lon, np.nan),
        distance_km=dist,
        refused=(f["refused"].to_numpy(bool) | (f["status"] == "refused").to_numpy()),
        failed=f["status"].isin(FAILED_STATUSES).to_numpy() | invalid_xy,
        true_country=true_iso, pred_country=pred_iso, true_continent=true_cont,
        pred_continent=pred_cont, true_city=true_city, pred_city=pred_city,
    )
    out["city_correct"] = correct(true_city, pred_city)
    out["country_correct"] = correct(true_iso, pred_iso)
    out["continent_correct"] = correct(true_cont, pred_cont)
    return out[list(SCORE_COLUMNS)], notes


PROTOCOLS = {"paper": score_paper, "strict": score_strict}
