"""Magnets and spread: which countries a run over-predicts, and how scattered its answers are.

From a score table's `true_country` / `pred_country` (so under the labels it was scored
with: `evaluate.labels`), over the clips with a predicted country (a refusal names none):

* per true country, the **entropy** of the predicted countries in bits (FairLocator's
  spread: 0 = the same answer for every clip of that country, right or wrong), with the
  most frequent answer and its share;
* per predicted country, the **over-prediction ratio**: times predicted / times true (the
  "every Asian city is Taipei" magnets); a country that is never the truth has no ratio
  (shown as never true), one true on fewer than `min_support` clips is withheld.

Names are compared as ISO 3166 codes where a code fits (agl.scoring.places), so "USA" and
"United States" are one country; a name no code fits stays as written.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from agl.scoring import places


def _codes(names: pd.Series) -> np.ndarray:
    codes = places.iso3_of_names(names)
    raw = names.to_numpy(dtype=object)
    return np.array([c if c is not None else (None if r is None or r != r or not str(r).strip()
                                               else str(r).strip()) for c, r in zip(codes, raw, strict=True)],
                    dtype=object)


def _name(code: str) -> str:
    return places.short_name(code) if len(code) == 3 and code.isupper() else code


def answered(scored: pd.DataFrame) -> pd.DataFrame:
    """(true, predicted) country codes of the clips with a predicted country, and the
    predicted point (NaN where none)."""
    true, pred = _codes(scored["true_country"]), _codes(scored["pred_country"])
    keep = np.array([t is not None and p is not None and str(p).lower() != "unknown"
                     for t, p in zip(true, pred, strict=True)], dtype=bool)
    return pd.DataFrame({"true": true[keep], "pred": pred[keep],
                         "lat": scored["pred_lat"].to_numpy(dtype=float)[keep],
                         "lon": scored["pred_lon"].to_numpy(dtype=float)[keep]})


def spread(scored: pd.DataFrame, min_support: int = 10) -> pd.DataFrame:
    """Per true country (most clips first): n, entropy of the answers (bits), the top answer
    and its share; `withheld` where n < min_support."""
    pairs = answered(scored)
    rows = []
    for true, g in pairs.groupby("true", sort=False):
        counts = g["pred"].value_counts()
        p = counts.to_numpy(dtype=float) / len(g)
        top = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[0]
        rows.append({"country": _name(true), "n": len(g), "entropy_bits": float(-(p * np.log2(p)).sum()),
                     "top_answer": _name(top[0]), "top_share": top[1] / len(g),
                     "withheld": len(g) < min_support})
    frame = pd.DataFrame(rows, columns=["country", "n", "entropy_bits", "top_answer", "top_share", "withheld"])
    return frame.sort_values(["n", "country"], ascending=[False, True], ignore_index=True)


def magnets(scored: pd.DataFrame, min_support: int = 10) -> pd.DataFrame:
    """Per predicted country (most over-predicted first): times predicted, times true, their
    ratio (NaN: never true, or withheld: true on fewer than min_support clips), and the
    country's code and where the run puts it (the median of its predicted points naming it:
    the map's circle; NaN where it gave none)."""
    pairs = answered(scored)
    predicted, true = pairs["pred"].value_counts(), pairs["true"].value_counts()
    where = pairs.groupby("pred")[["lat", "lon"]].median()
    rows = []
    for code, n_pred in predicted.items():
        n_true = int(true.get(code, 0))
        supported = n_true >= min_support
        rows.append({"country": _name(code), "code": code, "predicted": int(n_pred), "true": n_true,
                     "ratio": n_pred / n_true if supported else None,
                     "withheld": 0 < n_true < min_support, "excess": int(n_pred) - n_true,
                     "lat": where.loc[code, "lat"], "lon": where.loc[code, "lon"]})
    frame = pd.DataFrame(rows, columns=["country", "code", "predicted", "true", "ratio", "withheld", "excess",
                                        "lat", "lon"])
    return frame.sort_values(["excess", "country"], ascending=[False, True], ignore_index=True)
