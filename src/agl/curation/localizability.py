"""Audio Localizability: which sound categories make a clip localizable, and a selection by it.

The AGL1K paper's full text is not available to us. Its published description is: category
contributions are rated by three LLM judges that read a strong ALM's reasoning for each clip;
on clips whose localization error is below γ a regression y = a_i·x gives each category's
positive weight a_i, on the rest y = ā_i·x gives its negative weight ā_i; categories split into
positive (P) and negative (N) sets; a clip's localizability l_k aggregates its categories'
weights, and clips with l_k > θ are highly localizable; the final set is chosen with speech
presence balanced. This module implements exactly that. Every choice the description leaves
open is written down here, and every constant is a param (params.yaml `localizability:`):

1. Categories: the 8 AGL1K category columns (the 7 AudioSet roots, "Channel, environment and
   background" split as in `agl.curation.ontology`).
2. Reference run (`reference`, a predictions file): the strong ALM whose reasoning is read
   and whose errors define y. Per-clip error e_k: geodesic km (WGS-84) to the manifest's
   coordinates. A refused, unparseable or coordinate-less answer counts as
   `missing_error_km` (10,000 km, the paper's scoring rule); a failed call (no answer at all)
   is left out of fitting and counted.
3. Ratings x_k,i (`features: judges`): each judge rates category i's contribution to the
   reasoning of clip k on the integer scale 0..`rating_max` (rubric:
   `prompts/localizability-judge-v1.txt`); x_k,i is the mean over the judges that gave a valid
   rating, divided by `rating_max`, so x ∈ [0, 1]. A clip whose reasoning is empty (or the
   importer's "No reasoning provided") is not rated and not fitted: there is nothing to read.
   Judges are any inference backends (cached like every call) or the offline `lexical` judge:
   rating = number of distinct category terms (`data/localizability_vocabulary.json`) in the
   reasoning, capped at `rating_max`. Agreement: Krippendorff's alpha (interval metric) over
   (clip, category) units, and the mean pairwise Spearman correlation between judges.
   `features: tags` uses the tag stage's category scores as x instead (the offline demo:
   its baselines give no reasoning to read).
4. Target y and the two regressions: the clips used to fit (a seeded `holdout_fraction` is
   kept out) are split at γ (`gamma_km`). Good clips (e_k < γ): y_k = 1 - e_k/γ (1 = exact).
   Bad clips: y_k = min(1, (e_k - γ)/(`error_cap_km` - γ)) (1 = as far off as possible). Each
   regression is non-negative least squares without intercept (y = a·x with a ≥ 0: a weight
   is a contribution, never a sign flip); a_i from the good clips, ā_i from the bad ones.
   Fewer than `min_clips_per_side` clips on either side is an error naming the counts.
5. P = {i : a_i > ā_i}, N = {i : ā_i > a_i}; a category with a_i = ā_i (e.g. never rated) is
   in neither and weighs 0.
6. l_k = Σ_{i∈P} a_i·t_k,i − Σ_{i∈N} ā_i·t_k,i, where t_k,i is clip k's score for category i
   from the tag stage (what the clip contains), so every clip of the pool gets an l_k, not
   only those the reference model answered. Highly localizable: l_k > θ (`theta`).
7. Selection: among highly localizable clips, `speech_share` of the set has speech and the
   rest none, each side by descending l_k. has_speech: the tag stage's VAD speech fraction
   ≥ `speech_min_fraction` (`speech_from: vad`) or `human_sounds` ≥ `human_sounds_min`
   (`speech_from: tags`, the paper's analysis rule with 0.1). `target_size` caps the set;
   null means the largest set that keeps the balance. A side that runs short is never
   topped up from the other side; the shortfall is reported.
8. Check: Spearman's rank correlation between l_k and e_k on the held-out clips (never used to
   fit); localizability predicts error when it is clearly negative.

The pieces: `agl.curation.localizability_params` (the config), `localizability_judges`
(step 3) and `localizability_weights` (steps 4 to 8); `run_localizability` here joins them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agl.core.geo import geodesic_km
from agl.curation.localizability_judges import Rating, agreement, has_reasoning, mean_ratings, run_judges
from agl.curation.localizability_params import LocalizabilityConfig
from agl.curation.localizability_weights import (
    Weights,
    fit_localizability,
    holdout_split,
    localizability,
    rank_check,
    select,
)
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError


@dataclass
class LocalizabilityResult:
    """What the stage writes: the weights, the per-clip table, every rating, the selected
    keys and the summary (its metrics)."""

    weights: Weights
    clips: Any  # DataFrame, one row per tagged clip
    ratings: list[Rating]
    selected: list[str]
    summary: dict[str, Any]


def reference_errors(manifest, predictions: dict, missing_error_km: float):
    """Per manifest key: (error km or None, reasoning or None, status). See docstring, 2."""
    truth = manifest.set_index("key")
    out: dict[str, tuple[float | None, str | None, str]] = {}
    for key, p in predictions.items():
        if key not in truth.index:
            continue
        status = str(getattr(p.status, "value", p.status))
        if status == "failed":
            out[key] = (None, p.reasoning, status)
        elif p.has_coordinates:
            e = float(geodesic_km(truth.at[key, "latitude"], truth.at[key, "longitude"],
                                  p.latitude, p.longitude))
            out[key] = (e, p.reasoning, status)
        else:
            out[key] = (missing_error_km, p.reasoning, status)
    return out


def run_localizability(manifest, tags, predictions: dict, cfg: LocalizabilityConfig) -> LocalizabilityResult:
    """The stage's computation. `tags`: the tag stage's table; `predictions`: key -> Prediction."""
    import pandas as pd

    tags = tags[tags["status"] == "ok"].reset_index(drop=True)
    keys = list(tags["key"].astype(str))
    t = tags[list(CATEGORY_COLUMNS)].to_numpy(dtype=float)
    if np.isnan(t).any():
        bad = keys[int(np.where(np.isnan(t).any(axis=1))[0][0])]
        raise AglError(f"tags: clip {bad} has an empty category score; rerun the tag stage")
    ref = reference_errors(manifest, predictions, cfg.missing_error_km)
    reasoning = {k: ref[k][1] for k in keys if k in ref and has_reasoning(ref[k][1])}
    ratings = run_judges(reasoning, cfg)
    rated = mean_ratings(ratings, cfg.rating_max)

    if cfg.features == "judges":
        x_of = {k: v for k, v in rated.items()}
    else:
        x_of = {k: t[i] for i, k in enumerate(keys)}
    usable = [k for k in keys if k in ref and ref[k][0] is not None and k in x_of]
    if not usable:
        why = (f"{len(reasoning)} of {sum(k in ref for k in keys)} reference answers have reasoning "
               "text to rate" if cfg.features == "judges" else "no clip has a reference answer")
        raise AglError(f"localizability: no clip has both a reference error and features ({why}); "
                       "use a reference run with reasoning, or features: tags")
    held = holdout_split(usable, cfg.holdout_fraction, cfg.seed)
    fit_keys = [k for k in usable if k not in held]
    x_fit = np.vstack([x_of[k] for k in fit_keys]) if fit_keys else np.empty((0, len(CATEGORY_COLUMNS)))
    e_fit = np.asarray([ref[k][0] for k in fit_keys], dtype=float)
    weights = fit_localizability(x_fit, e_fit, cfg)

    l_k = localizability(t, weights)
    if cfg.speech_from == "vad":
        frac = pd.to_numeric(tags["speech_fraction"], errors="coerce").to_numpy(dtype=float)
        if np.isnan(frac).any():
            raise AglError("localizability.speech_from is vad but the tag stage measured no speech "
                           "fraction (set tag.speech: vad, or speech_from: tags)")
        has_speech = frac >= cfg.speech_min_fraction
    else:
        has_speech = tags["human_sounds"].to_numpy(dtype=float) >= cfg.human_sounds_min
    selected, sel_info = select(keys, l_k, has_speech, cfg.theta, cfg.target_size, cfg.speech_share)

    parts = _Parts(keys, ref, reasoning, ratings, rated, (fit_keys, held), weights, l_k, sel_info,
                   has_speech, selected, x_of)
    return LocalizabilityResult(weights, _clips_table(parts, cfg), ratings, selected, _summary(parts, cfg))


@dataclass(frozen=True)
class _Parts:
    """What `run_localizability` computed, for its summary."""

    keys: list[str]
    ref: dict
    reasoning: dict
    ratings: list
    rated: dict
    fit: tuple[list[str], set]  # (fit keys, held-out keys)
    weights: Any
    l_k: np.ndarray
    selection: dict
    has_speech: np.ndarray
    selected: list[str]
    x_of: dict  # key -> feature vector


def _clips_table(parts: _Parts, cfg: LocalizabilityConfig):
    """clips.csv: one row per tagged clip: l_k, split, the reference error, the features."""
    import pandas as pd  # heavy: the module's method code runs without it

    keys, ref, l_k, rated, x_of = parts.keys, parts.ref, parts.l_k, parts.rated, parts.x_of
    fit_keys, held = parts.fit
    split = ["holdout" if k in held else "fit" if k in set(fit_keys) else "unused" for k in keys]
    chosen = set(parts.selected)
    clips = pd.DataFrame({
        "key": keys, "l_k": l_k, "highly_localizable": l_k > cfg.theta, "has_speech": parts.has_speech,
        "selected": [k in chosen for k in keys], "split": split,
        "reference_status": [ref[k][2] if k in ref else "absent" for k in keys],
        "error_km": [ref[k][0] if k in ref else None for k in keys], "rated": [k in rated for k in keys],
    })
    for j, c in enumerate(CATEGORY_COLUMNS):
        clips[f"x_{c}"] = [x_of[k][j] if k in x_of else np.nan for k in keys]
    return clips


def _summary(parts: _Parts, cfg: LocalizabilityConfig) -> dict[str, Any]:
    """The stage's summary: counts, the judges' agreement, weights, selection, rank checks."""
    import pandas as pd  # heavy: the module's method code runs without it

    keys, ref, reasoning, ratings, weights, l_k = (parts.keys, parts.ref, parts.reasoning, parts.ratings,
                                                     parts.weights, parts.l_k)
    fit_keys, held = parts.fit
    error = [ref[k][0] if k in ref else None for k in keys]
    held_idx = [i for i, k in enumerate(keys) if k in held]
    fit_idx = [i for i, k in enumerate(keys) if k in set(fit_keys)]
    statuses = pd.Series([ref[k][2] if k in ref else "absent" for k in keys]).value_counts()
    rating_status = pd.Series([f"{r.judge}:{r.status}" for r in ratings]).value_counts()
    return {
        "clips": len(keys),
        "reference": {"answered": int(sum(k in ref for k in keys)),
                      "status": {str(k): int(v) for k, v in statuses.items()},
                      "with_reasoning": len(reasoning),
                      "failed_calls_left_out": int(sum(k in ref and ref[k][0] is None for k in keys))},
        "judges": {"names": [j.name for j in cfg.judges],
                   "clips_rated": len(parts.rated),
                   "ratings": {str(k): int(v) for k, v in rating_status.items()},
                   "note": None if reasoning else "the reference run has no reasoning text: "
                                                  "the judges rated nothing",
                   **{f"agreement_{k}": v for k, v in
                      agreement(ratings, [j.name for j in cfg.judges]).items()}},
        "features": cfg.features,
        "fit": {"clips": len(fit_keys), "good": weights.n_good, "bad": weights.n_bad},
        "weights": {c: {"a": float(a), "a_bar": float(b), "set": s} for c, a, b, s in
                    zip(CATEGORY_COLUMNS, weights.a, weights.a_bar, weights.sets, strict=True)},
        "P": [c for c, s in zip(CATEGORY_COLUMNS, weights.sets, strict=True) if s == "P"],
        "N": [c for c, s in zip(CATEGORY_COLUMNS, weights.sets, strict=True) if s == "N"],
        "selection": parts.selection,
        "check_holdout": rank_check(l_k[held_idx], np.asarray([error[i] for i in held_idx], float)),
        "check_fit": rank_check(l_k[fit_idx], np.asarray([error[i] for i in fit_idx], float)),
    }


def ratings_frame(ratings: Sequence[Rating]):
    """Every judge's ratings as a table: key, judge, status, one column per category, error."""
    import pandas as pd

    rows = [{"key": r.key, "judge": r.judge, "status": r.status,
             **{c: (r.ratings or {}).get(c) for c in CATEGORY_COLUMNS}, "error": r.error}
            for r in ratings]
    return pd.DataFrame(rows, columns=["key", "judge", "status", *CATEGORY_COLUMNS, "error"])
