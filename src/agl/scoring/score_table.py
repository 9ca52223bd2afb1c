"""The score table both protocols fill, and what they share to fill it.

`join_truth` puts the manifest's truth beside the predictions (one row per clip scored);
`Distinct` and `map_unique` run per-value work once per distinct value; `SCORE_COLUMNS` is
the table's layout. The protocols are `agl.scoring.protocol_paper` and `protocol_strict`
(described in `agl.scoring.protocols`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError

SPEECH_THRESHOLD = 0.1  # a clip "has speech" when human_sounds >= 0.1 (the paper's rule)
SCORE_COLUMNS = (
    "sample_id", "status", *CATEGORY_COLUMNS, "has_speech", "true_lat", "true_lon",
    "pred_lat", "pred_lon", "distance_km", "city_correct", "country_correct",
    "continent_correct", "refused", "failed", "true_city", "true_country", "true_continent",
    "pred_city", "pred_country", "pred_continent", "confidence",
)
FAILED_STATUSES = ("failed", "unparseable", "missing")
TEXT_FIELDS = ("city", "country", "continent")  # the predicted place names


def is_missing(value) -> bool:
    """None or a float NaN."""
    return value is None or (isinstance(value, float) and np.isnan(value))


@dataclass(frozen=True)
class Distinct:
    """A text column as its distinct values and, per row, the position of its value.

    Per-value work (normalising, lower-casing, testing for refusals) then runs once per
    distinct value instead of once per row: a run names a few hundred places over a
    million rows, and one hash pass per column replaces one per operation.
    """

    values: np.ndarray  # object: the distinct values, then the value of the missing rows
    index: np.ndarray  # per row; -1 (the last value) where the column is missing

    @classmethod
    def of(cls, column, missing: object = None) -> Distinct:
        """`column`'s values (None, NaN, pd.NA count as missing and read as `missing`)."""
        codes, uniques = pd.factorize(np.asarray(column, dtype=object), use_na_sentinel=True)
        values = np.empty(len(uniques) + 1, dtype=object)
        values[:-1] = uniques
        values[-1] = missing
        return cls(values, codes)

    def map(self, fn: Callable) -> Distinct:
        """`fn` of every distinct value (the rows keep their positions)."""
        values = np.fromiter((fn(v) for v in self.values), dtype=object, count=len(self.values))
        return Distinct(values, self.index)

    def rows(self) -> np.ndarray:
        """Every row's value, as an object array."""
        return self.values[self.index]

    def test(self, fn: Callable[[object], bool]) -> np.ndarray:
        """`fn` of every row's value, as booleans (a boolean take: no object array)."""
        flags = np.fromiter((bool(fn(v)) for v in self.values), dtype=bool, count=len(self.values))
        return flags[self.index]


def lower_match(a: Distinct, b: Distinct) -> np.ndarray:
    """1.0 where the two columns' lower-cased texts are equal, 0.0 where they differ, NaN
    where either is missing."""
    words = [None if is_missing(v) else str(v).lower() for v in (*a.values, *b.values)]
    joint, _ = pd.factorize(np.array(words, dtype=object), use_na_sentinel=True)
    ja, jb = joint[: len(a.values)][a.index], joint[len(a.values):][b.index]
    return np.where((ja >= 0) & (jb >= 0), (ja == jb).astype(float), np.nan)


def map_unique(series: pd.Series, fn: Callable) -> pd.Series:
    """`fn` applied to each distinct value only (a run has few distinct names)."""
    codes, uniques = pd.factorize(series.astype(object), use_na_sentinel=True)
    mapped = np.array([fn(u) for u in uniques] + [fn(None)], dtype=object)
    return pd.Series(mapped[codes], index=series.index)  # code -1 takes fn(None), the last


def join_truth(manifest: pd.DataFrame, preds: pd.DataFrame, how: str) -> pd.DataFrame:
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
