"""The `paper` scoring protocol: the authors' released analysis, reproduced exactly.

The rules are listed in `agl.scoring.protocols`; here they are carried out, with the
authors' country and continent normalisation re-expressed as data.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from agl.core.geo import geodesic_km_later
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.predictions.authors import PORTED
from agl.scoring.score_table import (
    FAILED_STATUSES,
    SCORE_COLUMNS,
    TEXT_FIELDS,
    Distinct,
    is_missing,
    join_truth,
    lower_match,
)

PAPER_REFUSAL_KM = 10_000.0
PAPER_REFUSALS = frozenset(
    ["0", "-1", "", "null", "none", "n/a", "na", "unknown", "unable", "cannot", "0.0"]
)

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


@lru_cache(maxsize=100_000)
def paper_country(name: str | None) -> str | None:
    """The authors' country normalisation (reproduced for exact scores)."""
    if is_missing(name) or str(name).strip() == "":
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
    if is_missing(name) or str(name).strip() == "":
        return None
    s = str(name).strip()
    if "arctic" in s.lower():
        return "Antarctica"
    out = s.lower().title()
    return "Oceania" if out == "Australia" else out


def _is_refusal_word(value) -> bool:
    """The authors' test: the value, as text, stripped and lower-cased, is a refusal word."""
    return is_missing(value) or str(value).strip().lower() in PAPER_REFUSALS


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
        views = {name: original.view(name, f"pred_{name}").to_numpy() for name in TEXT_FIELDS}
        texts = {name: Distinct.of(view) for name, view in views.items()}
        refusals = {name: _paper_refusal(pd.Series(view)) for name, view in views.items()}
        absent = {name: f[f"pred_{name}"].isna().to_numpy() for name in TEXT_FIELDS}
    else:
        # A missing field reads "Unknown", as the authors' pipeline wrote failures.
        texts = {name: Distinct.of(f[f"pred_{name}"], missing="Unknown") for name in TEXT_FIELDS}
        views = {name: d.rows() for name, d in texts.items()}
        refusals = {name: d.test(_is_refusal_word) for name, d in texts.items()}
        absent = {name: d.index < 0 for name, d in texts.items()}
    return texts, views, refusals, absent


def score_paper(manifest: pd.DataFrame, preds: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The `paper` protocol (see `agl.scoring.protocols`): the score table of the clips that
    have a prediction, and the notes (counts the protocol reports)."""
    joined = join_truth(manifest, preds, how="inner")
    tagged = np.any([joined[c].to_numpy() != 0 for c in CATEGORY_COLUMNS], axis=0)
    notes = {"protocol": "paper", "n_untagged_dropped": int((~tagged).sum())}
    f = joined if tagged.all() else joined[tagged].reset_index(drop=True)
    status = Distinct.of(f["status"])
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
    # a row of this project's run read by the authors' parser port is not a published row
    ported = np.fromiter((isinstance(o, dict) and PORTED in o for o in f["original"].to_numpy()),
                         dtype=bool, count=len(f)) if has_original.any() else has_original
    na = _not_attempted(status, has_original & ~ported, absent)
    if na:
        notes["not_applicable"] = sorted(na)
    refused = ref_lat | ref_lon
    for name in TEXT_FIELDS:
        if name not in na:
            refused = refused | text_refusals[name]

    pred_country = texts["country"].map(paper_country)
    pred_continent = texts["continent"].map(paper_continent)
    true_city = Distinct.of(f["true_city"])
    true_country = Distinct.of(f["true_country"]).map(paper_country)
    true_continent = Distinct.of(f["true_continent"]).map(paper_continent)
    compared = {"city": (true_city, texts["city"]), "country": (true_country, pred_country),
                "continent": (true_continent, pred_continent)}
    cols = {c: f[c].to_numpy() for c in SCORE_COLUMNS if c in f.columns}
    # The join passes these two through as the predictions' own arrays: the score table
    # gets copies, so it never shares memory with the caller's frame.
    cols.update(status=cols["status"].copy(), confidence=cols["confidence"].copy())
    for name in TEXT_FIELDS:
        cols[f"{name}_correct"] = (np.full(len(f), np.nan) if name in na
                                   else lower_match(*compared[name]))
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


def _not_attempted(status: Distinct, has_original: np.ndarray,
                   absent: dict[str, np.ndarray]) -> set[str]:
    """Text fields that this project's run gave in none of its answered (ok/partial) rows,
    while it answered some: the run does not attempt them. A run that refuses everything
    attempts every field (its refusals count); an authors' file always has all five."""
    answered = status.test(lambda s: s in ("ok", "partial", "truncated")) & ~has_original
    if not answered.any():
        return set()
    return {name for name in TEXT_FIELDS if absent[name][answered].all()}
