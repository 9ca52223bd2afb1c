"""A covariate regression: is a clip's country answered right, given where and what it is?

Logistic regression of country-correct on the recording place's country's World Bank income
(high income or not: the lower levels hold a few dozen clips), log population density,
the language-resource proxy (log speakers of its main language), speech present and log clip
length, the continuous ones standardised (odds ratio per standard deviation). Covariates come
from agl.scoring.covariates by the recording place's country (agl.scoring.places).

statsmodels is not a dependency, so the errors are clustered by a **cluster bootstrap over
countries** (whole countries resampled, every clip of a drawn country with it; the same fits
as the report's factor analysis, agl.report.analysis): percentile intervals of the odds
ratios. The events-per-variable rule as the factor analysis has it: the model needs
`min_events` correct and as many wrong answers per covariate, else nothing is estimated and
the table says why. Clips whose country lacks a covariate are left out and counted.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from agl.report.analysis import _bootstrap_fits, _logit
from agl.scoring import covariates, places

TERMS = ("high_income", "log_density", "log_speakers", "speech", "log_seconds")
STANDARDISED = ("log_density", "log_speakers", "log_seconds")


def design(scored: pd.DataFrame, seconds: dict[str, float] | None) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """(covariates per clip, country-correct, country codes) over the clips where the country
    is scored; a covariate missing for a clip leaves its value NaN."""
    rows = scored[scored["country_correct"].notna()].reset_index(drop=True)
    iso = places.locate(rows["true_lat"], rows["true_lon"]).iso3
    income = [covariates.covariate("income", c) for c in iso]
    x = pd.DataFrame({
        "high_income": [np.nan if v is None else float(v == "High") for v in income],
        "log_density": [np.nan if (v := covariates.log_density(c)) is None else v for c in iso],
        "log_speakers": [np.nan if (v := covariates.log_speakers(c)) is None else v for c in iso],
        "speech": rows["has_speech"].astype(float).to_numpy(),
    })
    secs = (rows["sample_id"].astype(str).map(seconds or {}).astype(float) if seconds
            else pd.Series(np.nan, index=rows.index))
    x["log_seconds"] = np.log10(secs.where(secs > 0)).to_numpy()
    return x, rows["country_correct"].to_numpy(dtype=float), np.array([c or "?" for c in iso], dtype=object)


def covariate_model(scored: pd.DataFrame, seconds: dict[str, float] | None = None, *,
                    bootstrap: int = 200, seed: int = 0, min_events: int = 10) -> pd.DataFrame:
    """One row per term: clips used, odds ratio with its 95% country-bootstrap interval, or a
    note. `attrs`: n, left out, events, resamples used and failed, and `insufficient`."""
    x, y, iso = design(scored, seconds)
    terms = [t for t in TERMS if x[t].notna().any() and x[t].dropna().nunique() > 1]
    keep = x[terms].notna().all(axis=1).to_numpy() if terms else np.zeros(len(y), dtype=bool)
    xs, ys, cs = x.loc[keep, terms].copy(), y[keep], iso[keep]
    for t in STANDARDISED:
        if t in xs and xs[t].std() > 0:
            xs[t] = (xs[t] - xs[t].mean()) / xs[t].std()
    hits, n = int(ys.sum()), int(len(ys))
    base = {"n": n, "left_out": int((~keep).sum()), "correct": hits, "bootstrap": 0,
            "bootstrap_failed": 0, "insufficient": ""}
    absent = [t for t in TERMS if t not in terms]
    needs = min_events * max(len(terms), 1)
    why = ""
    if not terms or min(hits, n - hits) < needs:
        why = (f"insufficient data (n = {n} clips: {hits} correct, {n - hits} wrong; needs {needs} "
               f"of each, {min_events} per covariate for {len(terms)})")
    point = None if why else _logit(xs.to_numpy(), ys)
    if point is None:
        why = why or f"the logistic regression did not converge on the {n} clips"
        frame = pd.DataFrame([{"term": t, "odds_ratio": math.nan, "lo": math.nan, "hi": math.nan,
                               "note": why} for t in TERMS])
        frame.attrs.update(base, insufficient=why)
        return frame
    _, labels = np.unique(cs, return_inverse=True)
    draws, failed = _bootstrap_fits(xs.to_numpy(), ys, bootstrap, seed, labels.ravel())
    arr = np.array(draws) if draws else np.full((1, len(point)), np.nan)
    lo, hi = np.nanpercentile(arr, [2.5, 97.5], axis=0)
    rows = [{"term": t, "odds_ratio": float(np.exp(point[i + 1])), "lo": float(np.exp(lo[i + 1])),
             "hi": float(np.exp(hi[i + 1])), "note": "per standard deviation" if t in STANDARDISED else ""}
            for i, t in enumerate(terms)]
    rows += [{"term": t, "odds_ratio": math.nan, "lo": math.nan, "hi": math.nan,
              "note": "constant or unknown for every clip"} for t in absent]
    frame = pd.DataFrame(rows)
    frame.attrs.update(base, bootstrap=len(draws), bootstrap_failed=failed,
                       countries=int(np.unique(cs).size))
    return frame
