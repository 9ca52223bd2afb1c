"""Breakdowns of one scored run, and comparisons between runs.

Input is a score table from `agl.scoring.evaluate.score_run` (one row per clip; `distance_km` and the
`*_correct` columns are NaN where the protocol excludes a row). Every breakdown returns a
DataFrame with one row per group and the same metric columns, each with a seeded 95%
bootstrap interval (`agl.scoring.metrics.bootstrap_ci`). Alongside each mean it carries the counts
behind it (`n_km`, `country_n`, `country_hits`, ...), so the rows of a partition (speech split,
continent, country with its 'other' row, status) sum back exactly to the whole run.

Per-category rows (the paper's per-scene distances) are NOT a partition: a clip can hold
several sound categories at once. They cover non-speech clips with that category >= 0.1.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.scoring.clusters import subset
from agl.scoring.design import effective_clusters
from agl.scoring.labels import recorded_in
from agl.scoring.metrics import cluster_ci, no_coordinates
from agl.scoring.paired import paired_test
from agl.scoring.wording import insufficient

SCENE_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORY_COLUMNS if c != "human_sounds")
PRESENCE = 0.1  # the paper's threshold: a category (or speech) is present at a score >= 0.1
NO_PREDICTION = "(none)"
UNKNOWN = "(unknown)"
OTHER = "(other)"
# Continent answers that are no answer: the paper's refusal tokens (the paper protocol keeps
# them verbatim in pred_continent), plus the "Not Specified" some replies give.
NO_ANSWER = frozenset({"", "nan", "0", "0.0", "-1", "null", "none", "n/a", "na", "unknown",
                       "unable", "cannot", "not specified"})


def clusters_of(frame: pd.DataFrame) -> np.ndarray | None:
    """The rows' cluster labels renumbered 0..G-1 (the `cluster` column the report adds,
    agl.report.inputs.with_clusters); None without one (every clip its own)."""
    if "cluster" not in frame:
        return None
    return subset(frame["cluster"].to_numpy(), slice(None))


def group_row(frame: pd.DataFrame, *, bootstrap: int = 1000, seed: int = 0) -> dict:
    """Counts, means and 95% CIs of one group of scored clips; the CIs resample its clusters
    (the `cluster` column) where it has one, and `n_clusters` counts them."""
    d = frame["distance_km"].to_numpy(dtype=float)
    labels = clusters_of(frame)

    def bootstrap_ci(values, stat, n, seed):
        return cluster_ci(values, stat, n, seed, clusters=labels)

    row: dict = {"n": int(len(frame)), "n_km": int(np.isfinite(d).sum())}
    if labels is not None:
        row["n_clusters"] = int(np.unique(labels).size)
        # Kish's effective number of clusters: what unequal clusters are worth (minimum
        # support counts these; agl.scoring.design)
        row["n_effective_clusters"] = round(effective_clusters(labels), 2) if len(labels) else 0.0
    row["km_sum"] = float(np.nansum(d))
    row["mean_km"] = float(np.nanmean(d)) if row["n_km"] else math.nan
    row["mean_km_lo"], row["mean_km_hi"] = bootstrap_ci(d, "mean", bootstrap, seed)
    row["median_km"] = float(np.nanmedian(d)) if row["n_km"] else math.nan
    # a median at the protocol's fixed distance for clips without coordinates is a refusal
    fixed = d[no_coordinates(frame)] if {"pred_lat", "pred_lon"} <= set(frame.columns) else d[:0]
    row["median_refused"] = bool(fixed.size and row["median_km"] == fixed[0])
    for i, level in enumerate(("continent", "country", "city"), start=1):
        v = frame[f"{level}_correct"].to_numpy(dtype=float)
        scored = np.isfinite(v)
        row[f"{level}_n"] = int(scored.sum())
        row[f"{level}_hits"] = int(np.nansum(v))
        row[f"{level}_acc"] = float(v[scored].mean()) if scored.any() else math.nan
        row[f"{level}_acc_lo"], row[f"{level}_acc_hi"] = bootstrap_ci(v, "mean", bootstrap,
                                                                      seed + i)
    for i, flag in enumerate(("refused", "failed"), start=4):
        v = frame[flag].to_numpy(dtype=float)
        name = "reject" if flag == "refused" else "failure"
        row[f"{flag}_count"] = int(v.sum())
        row[f"{name}_rate"] = float(v.mean()) if len(v) else math.nan
        row[f"{name}_rate_lo"], row[f"{name}_rate_hi"] = bootstrap_ci(v, "mean", bootstrap,
                                                                      seed + i)
    return row


def _table(groups: list[tuple[str, pd.DataFrame]], by: str, **boot) -> pd.DataFrame:
    rows = [{"breakdown": by, "group": name, **group_row(g, **boot)} for name, g in groups]
    return pd.DataFrame(rows)


def by_speech(scored: pd.DataFrame, **boot) -> pd.DataFrame:
    """Speech (human_sounds >= 0.1) vs non-speech: a partition."""
    speech = scored["has_speech"].astype(bool)
    return _table([("speech", scored[speech]), ("non-speech", scored[~speech])], "speech", **boot)


def by_category(scored: pd.DataFrame, **boot) -> pd.DataFrame:
    """Per sound category on non-speech clips (overlapping groups, not a partition)."""
    quiet = scored[~scored["has_speech"].astype(bool)]
    groups = [(c, quiet[quiet[c] >= PRESENCE]) for c in SCENE_CATEGORIES]
    return _table([(c, g) for c, g in groups if len(g)], "category (non-speech)", **boot)


def _label(series: pd.Series) -> pd.Series:
    return series.fillna("").astype(str).str.strip().replace("", UNKNOWN)


def by_continent(scored: pd.DataFrame, **boot) -> pd.DataFrame:
    """Per true continent: a partition ('(unknown)' where the manifest has none)."""
    labels = _label(scored["true_continent"])
    return _table([(k, scored[labels == k]) for k in sorted(labels.unique())], "continent", **boot)


def by_country(scored: pd.DataFrame, *, min_clips: int = 10, **boot) -> pd.DataFrame:
    """Per true country with >= min_clips clips, the rest pooled in one 'other' row."""
    labels = _label(scored["true_country"])
    counts = labels.value_counts()
    big = sorted(counts[counts >= min_clips].index, key=lambda k: (-counts[k], k))
    groups = [(k, scored[labels == k]) for k in big]
    rest = ~labels.isin(big)
    if rest.any():
        n_small = int(labels[rest].nunique())
        groups.append((f"other ({n_small} countries < {min_clips} clips)", scored[rest]))
    table = _table(groups, "country", **boot)
    # Name the mix a label hides (AGL1K's "China": 214 of its 221 clips recorded in Taiwan).
    mix = [recorded_in(k, g["true_lat"], g["true_lon"]) if k in big else "" for k, g in groups]
    if any(mix):
        table["recorded_in"] = mix
    return table


def by_status(scored: pd.DataFrame, **boot) -> pd.DataFrame:
    """Per prediction status (ok, partial, refused, ...): a partition."""
    status = scored["status"].astype(str)
    return _table([(k, scored[status == k]) for k in sorted(status.unique())], "status", **boot)


def continent_confusion(scored: pd.DataFrame, *, collapse: bool = True) -> pd.DataFrame:
    """Counts of true continent (rows) x predicted continent (columns, '(none)' = no answer).

    With `collapse`, predicted labels that name no true continent of the run (e.g. the
    paper's "Europe Or Asia") are counted in one '(other)' column. Each row sums to the
    number of clips of that true continent."""
    truth = _label(scored["true_continent"])
    pred = scored["pred_continent"].fillna("").astype(str).str.strip()
    pred = pred.where(~pred.str.lower().isin(NO_ANSWER), NO_PREDICTION)
    if collapse:
        known = set(truth) | {NO_PREDICTION}
        pred = pred.where(pred.isin(known), OTHER)
    table = pd.crosstab(truth, pred)
    tail = [c for c in (OTHER, NO_PREDICTION) if c in table.columns]
    cols = sorted(c for c in table.columns if c not in tail) + tail
    table = table[cols]
    table.index.name, table.columns.name = "true", "predicted"
    return table


def calibration(scored: pd.DataFrame, *, bins: int = 5, **boot) -> pd.DataFrame:
    """Country accuracy and mean km per bin of self-reported confidence (empty if none)."""
    conf = scored["confidence"].to_numpy(dtype=float)
    has = np.isfinite(conf)
    if not has.any():
        return pd.DataFrame()
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(conf, edges[1:-1], right=False), 0, bins - 1)
    rows = []
    for b in range(bins):
        g = scored[has & (idx == b)]
        if not len(g):
            continue
        row = {"breakdown": "confidence", "group": f"[{edges[b]:.1f}, {edges[b + 1]:.1f}"
               + ("]" if b == bins - 1 else ")"), "mean_confidence": float(g["confidence"].mean())}
        rows.append({**row, **group_row(g, **boot)})
    table = pd.DataFrame(rows)
    # Expected calibration error against country accuracy, over bins with scored rows.
    ok = table["country_n"] > 0
    w = table.loc[ok, "country_n"] / table.loc[ok, "country_n"].sum()
    table.attrs["ece_country"] = float(
        (w * (table.loc[ok, "mean_confidence"] - table.loc[ok, "country_acc"]).abs()).sum()
    )
    return table


def run_breakdowns(scored: pd.DataFrame, *, min_clips: int = 10, bootstrap: int = 1000,
                   seed: int = 0, confidence_bins: int = 5) -> dict[str, pd.DataFrame]:
    """Every breakdown of one run by name (the confusion matrix as counts)."""
    boot = {"bootstrap": bootstrap, "seed": seed}
    out = {
        "all": _table([("all", scored)], "all", **boot),
        "speech": by_speech(scored, **boot),
        "category": by_category(scored, **boot),
        "continent": by_continent(scored, **boot),
        "country": by_country(scored, min_clips=min_clips, **boot),
        "status": by_status(scored, **boot),
        "confusion": continent_confusion(scored),
    }
    cal = calibration(scored, bins=confidence_bins, **boot)
    if not cal.empty:
        out["calibration"] = cal
    return out


# --- paired comparison ------------------------------------------------------------------------


def compare_runs(a: pd.DataFrame, b: pd.DataFrame, *, n_boot: int = 2000, n_perm: int = 10000,
                 seed: int = 0, min_support: int = 1) -> pd.DataFrame:
    """Run A vs run B on their common clips: mean km and country accuracy (A - B); a metric
    with fewer than `min_support` common scored clips (or clusters, where the tables carry a
    `cluster` column) gets a note instead of an estimate. Clusters: paired_test's."""
    j = a.merge(b, on="sample_id", suffixes=("_a", "_b"))
    rows = []
    for i, col in enumerate(("distance_km", "country_correct", "continent_correct")):
        r = paired_test(j[f"{col}_a"], j[f"{col}_b"], metric=col, n_boot=n_boot, n_perm=n_perm,
                        seed=seed + i, min_n=min_support,
                        clusters=j["cluster_a"].to_numpy() if "cluster_a" in j else None)
        rows.append(r.__dict__)
    frame = pd.DataFrame(rows)
    frame.attrs["common_clips"] = int(len(j))
    return frame


# --- factor analysis ----------------------------------------------------------------------------


def factor_design(scored: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Presence (score >= 0.1) of speech and each scene category, and country-correct (0/1),
    over the rows where the protocol scores the country."""
    rows = scored[scored["country_correct"].notna()]
    x = pd.DataFrame({"speech": rows["has_speech"].astype(float).to_numpy()})
    for c in SCENE_CATEGORIES:
        x[c] = (rows[c].to_numpy(dtype=float) >= PRESENCE).astype(float)
    return x, rows["country_correct"].to_numpy(dtype=float)


def country_factors(scored: pd.DataFrame, *, bootstrap: int = 200, seed: int = 0,
                    min_present: int = 10, min_events_per_factor: int = 10) -> pd.DataFrame:
    """Logistic regression of country-correct on speech + sound-category presence.

    Coefficients are log-odds (odds ratio = exp); 95% CIs are percentile intervals over
    `bootstrap` row resamples (statsmodels is not a dependency). A factor that is constant
    over the scored rows cannot be estimated and is reported with a note, not a number.

    Minimum support (a fit on a handful of correct answers gives huge, meaningless odds
    ratios): a factor needs `min_present` clips with it and `min_present` without, else it is
    left out with an "insufficient data" note; the model needs at least
    `min_events_per_factor` correct and as many wrong answers per factor it estimates (the
    events-per-variable rule, Peduzzi et al. 1996), else no factor is estimated and
    `attrs["insufficient"]` says why. Bootstrap resamples whose fit fails (one outcome only,
    or no convergence) are counted in `attrs["bootstrap_failed"]`, never silently dropped.
    Every row carries its counts: clips with the factor and correct answers among them."""
    x, y = factor_design(scored)
    n, hits = int(len(y)), int(np.nansum(y))
    base = {"n": n, "correct": hits, "bootstrap_requested": int(bootstrap), "bootstrap": 0,
            "bootstrap_failed": 0, "insufficient": ""}

    def counts(c: str) -> dict:
        present = x[c].to_numpy() > 0
        return {"factor": c, "n_present": int(present.sum()),
                "n_correct_present": int(y[present].sum())}

    varying = [c for c in x.columns if x[c].nunique() > 1]
    supported = [c for c in varying if min(x[c].sum(), n - x[c].sum()) >= min_present]
    needs = min_events_per_factor * max(len(supported), 1)
    rows_out = [{**counts(c), **_NAN4, "note": note} for c, note in _left_out(x, varying, supported, min_present)]
    why = ""
    if min(hits, n - hits) < needs or not supported:
        why = (f"insufficient data (n = {n} scored clips: {hits} correct, {n - hits} wrong; "
               f"needs {needs} of each, {min_events_per_factor} per factor for "
               f"{len(supported)} factor(s))")
        if not supported:
            why = insufficient(n, min_present, " scored clips; no factor with enough clips"
                               " with and without it")
    xv = x[supported].to_numpy()
    point = None if why else _logit(xv, y)
    if point is None:
        why = why or f"the logistic regression did not converge on the {n} scored clips"
        frame = pd.DataFrame([{**counts(c), **_NAN4, "note": why} for c in x.columns])
        frame.attrs.update(base, insufficient=why)
        return frame
    rows = scored["country_correct"].notna().to_numpy()
    labels = clusters_of(scored[rows]) if "cluster" in scored else None
    draws, failed = _bootstrap_fits(xv, y, bootstrap, seed, labels)
    draws_a = np.array(draws) if draws else np.full((1, len(point)), np.nan)
    lo, hi = np.nanpercentile(draws_a, [2.5, 97.5], axis=0)
    names = ["intercept", *supported]
    rows = [{**(counts(nm) if nm in x else {"factor": nm, "n_present": n,
                                            "n_correct_present": hits}),
             "coef": float(point[i]), "coef_lo": float(lo[i]), "coef_hi": float(hi[i]),
             "odds_ratio": float(np.exp(point[i])), "note": ""} for i, nm in enumerate(names)]
    frame = pd.DataFrame(rows + rows_out)
    frame.attrs.update(base, bootstrap=len(draws), bootstrap_failed=failed)
    return frame


_NAN4 = dict.fromkeys(("coef", "coef_lo", "coef_hi", "odds_ratio"), math.nan)


def _left_out(x: pd.DataFrame, varying: list[str], supported: list[str], min_present: int) -> list[tuple[str, str]]:
    """(factor, note) of each factor the regression cannot estimate: constant, or too rare."""
    n = len(x)
    out = []
    for c in x.columns:
        if c not in varying:
            out.append((c, "constant over the scored clips"))
        elif c not in supported:
            k = int(min(x[c].sum(), n - x[c].sum()))
            out.append((c, insufficient(k, min_present, " clips with" if x[c].sum() <= n / 2 else " clips without")))
    return out


def _logit(xm: np.ndarray, ym: np.ndarray) -> np.ndarray | None:
    """(intercept, coefficients) of a logistic regression, None when it does not converge."""
    import warnings  # only the factor analysis silences and catches sklearn's warnings

    from sklearn.exceptions import ConvergenceWarning  # heavy: imported only when factors are fitted
    from sklearn.linear_model import LogisticRegression  # heavy: as above

    # Weak L2 (C=100) keeps estimates finite under separation in small resamples.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        try:
            model = LogisticRegression(C=100.0, max_iter=1000).fit(xm, ym)
        except (ConvergenceWarning, ValueError):
            return None
    return np.concatenate([model.intercept_, model.coef_[0]])


def _bootstrap_fits(xv: np.ndarray, y: np.ndarray, bootstrap: int, seed: int,
                    labels: np.ndarray | None = None) -> tuple[list[np.ndarray], int]:
    """The fits of `bootstrap` resamples, and how many failed (counted, not estimated). With
    cluster `labels` (0..G-1) a resample draws G whole clusters; single clips are the rows."""
    rng = np.random.default_rng(seed)
    draws, failed = [], 0
    groups = len(y) if labels is None else int(labels.max()) + 1 if len(labels) else 0
    members = np.argsort(labels, kind="stable") if labels is not None else None
    bounds = np.searchsorted(labels[members], np.arange(groups + 1)) if labels is not None else None
    for _ in range(bootstrap):
        idx = rng.integers(0, groups, size=groups)
        if labels is not None and groups != len(y):
            idx = np.concatenate([members[bounds[g]:bounds[g + 1]] for g in idx])
        got = _logit(xv[idx], y[idx]) if len(np.unique(y[idx])) == 2 else None
        if got is None:
            failed += 1  # one outcome only, or no convergence: counted, not estimated
        else:
            draws.append(got)
    return draws, failed
