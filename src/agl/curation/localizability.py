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
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any

import numpy as np

from agl.core.workspace import shared_path
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError
from agl.predictions.importer import NO_REASONING  # the authors' stand-in text in published files

JUDGE_PROMPT = "localizability-judge-v1"
CATEGORY_LABELS = {
    "human_sounds": "Human sounds (speech, singing, voices, footsteps, crowds)",
    "animal": "Animal (birds, insects, dogs, livestock, wild animals)",
    "music": "Music (instruments, songs, bells used musically)",
    "natural_sounds": "Natural sounds (wind, rain, thunder, water, waves, fire)",
    "channel": "Channel (how the sound was reproduced or recorded: radio, TV, microphone "
               "artefacts)",
    "environment_and_background": "Environment and background (room acoustics, indoor/outdoor "
                                  "ambience, background noise, hubbub)",
    "sounds_of_things": "Sounds of things (vehicles, engines, horns, machines, tools, doors)",
    "source_ambiguous_sounds": "Source-ambiguous sounds (clicks, knocks, rustles, rumbles, "
                               "whooshes)",
}


@dataclass(frozen=True)
class JudgeSpec:
    """A judge: the offline `lexical` one, or an inference backend + model (+ settings)."""

    name: str
    backend: str
    model: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LocalizabilityConfig:
    gamma_km: float = 2500.0
    theta: float = 0.0
    rating_max: int = 3
    judges: tuple[JudgeSpec, ...] = (JudgeSpec("lexical", "lexical"),)
    features: str = "judges"  # judges | tags
    target_size: int | None = None
    speech_share: float = 0.5
    speech_from: str = "vad"  # vad | tags
    speech_min_fraction: float = 0.1
    human_sounds_min: float = 0.1
    holdout_fraction: float = 0.3
    seed: int = 0
    error_cap_km: float = 20003.93
    missing_error_km: float = 10000.0
    min_clips_per_side: int = 3
    judge_cache: str = "cache/judges"
    judge_concurrency: int = 4
    judge_timeout_s: float = 120.0
    judge_max_retries: int = 5

    @classmethod
    def from_params(cls, params: dict[str, Any] | None,
                    source: str = "params.yaml localizability") -> LocalizabilityConfig:
        params = dict(params or {})
        params.pop("reference", None)  # a path, read by the stage
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise AglError(f"{source}: unknown key(s) {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(known | {'reference'}))}")
        if "judges" in params:
            params["judges"] = tuple(_judge(j, f"{source}.judges[{n}]")
                                     for n, j in enumerate(params["judges"] or []))
        cfg = cls(**params)
        checks = [
            (cfg.features in ("judges", "tags"), "features", "is judges or tags"),
            (cfg.speech_from in ("vad", "tags"), "speech_from", "is vad or tags"),
            (0.0 <= cfg.speech_share <= 1.0, "speech_share", "is in [0, 1]"),
            (0.0 < cfg.holdout_fraction < 1.0, "holdout_fraction", "is in (0, 1)"),
            (0.0 < cfg.gamma_km < cfg.error_cap_km, "gamma_km", "is in (0, error_cap_km)"),
            (cfg.rating_max >= 1, "rating_max", "is at least 1"),
            (cfg.target_size is None or cfg.target_size >= 1, "target_size", "is null or >= 1"),
            (cfg.features == "tags" or bool(cfg.judges), "judges", "lists at least one judge"),
        ]
        for ok, key, what in checks:
            if not ok:
                raise AglError(f"{source}.{key}: must be a value that {what}, "
                               f"got {getattr(cfg, key)!r}")
        names = [j.name for j in cfg.judges]
        if len(set(names)) != len(names):
            raise AglError(f"{source}.judges: judge names must be unique, got {names}")
        return cfg


def _judge(raw: Any, where: str) -> JudgeSpec:
    if raw == "lexical":
        return JudgeSpec("lexical", "lexical")
    if not isinstance(raw, dict) or "backend" not in raw:
        raise AglError(f"{where}: a judge is 'lexical' or {{name, backend, model, settings}}")
    name = str(raw.get("name") or f"{raw['backend']}:{raw.get('model', '')}")
    if raw["backend"] != "lexical" and not raw.get("model"):
        raise AglError(f"{where}: judge '{name}' needs a model")
    return JudgeSpec(name, str(raw["backend"]), str(raw.get("model") or ""),
                     dict(raw.get("settings") or {}))


# --- judges ---------------------------------------------------------------------------------


def has_reasoning(text: str | None) -> bool:
    return bool(text and text.strip() and text.strip() != NO_REASONING)


def load_vocabulary() -> dict[str, list[str]]:
    raw = json.loads(resources.files("agl").joinpath("data/localizability_vocabulary.json")
                     .read_text(encoding="utf-8"))
    return {c: list(raw[c]) for c in CATEGORY_COLUMNS}


def _term_pattern(term: str) -> re.Pattern[str]:
    stem = re.escape(term.rstrip("*"))
    tail = r"\w*" if term.endswith("*") else ""
    return re.compile(rf"\b{stem}{tail}\b", re.IGNORECASE)


class LexicalJudge:
    """Offline judge: distinct vocabulary terms of a category in the reasoning, capped."""

    def __init__(self, rating_max: int, vocabulary: dict[str, list[str]] | None = None):
        vocab = vocabulary or load_vocabulary()
        self.rating_max = rating_max
        self.patterns = {c: [_term_pattern(t) for t in vocab[c]] for c in CATEGORY_COLUMNS}

    def rate(self, reasoning: str) -> dict[str, int]:
        return {c: min(self.rating_max, sum(bool(p.search(reasoning)) for p in pats))
                for c, pats in self.patterns.items()}


def render_judge_prompt(template: str, reasoning: str, rating_max: int) -> str:
    cats = "\n".join(f"- {c}: {CATEGORY_LABELS[c]}" for c in CATEGORY_COLUMNS)
    return (template.replace("{CATEGORIES}", cats)
            .replace("{KEYS}", ", ".join(CATEGORY_COLUMNS))
            .replace("{SCALE_MAX}", str(rating_max))
            .replace("{REASONING}", reasoning.strip()))


def parse_ratings(text: str | None, rating_max: int) -> dict[str, int] | None:
    """The judge's JSON ratings, or None when the reply has no valid rating for every category."""
    if not text:
        return None
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        obj = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    out = {}
    for c in CATEGORY_COLUMNS:
        v = obj.get(c)
        if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v):
            return None
        if not 0 <= v <= rating_max:
            return None
        out[c] = int(v)
    return out


@dataclass(frozen=True)
class Rating:
    """One judge's ratings of one clip. `status`: ok | unparseable | failed."""

    key: str
    judge: str
    status: str
    ratings: dict[str, int] | None
    error: str | None = None


def run_judges(reasoning: dict[str, str], cfg: LocalizabilityConfig) -> list[Rating]:
    """Every judge over every clip with reasoning (key -> text). Backend calls are cached."""

    from agl.backends.base import ReplyStatus, Request
    from agl.prompts import load_prompt

    keys = sorted(reasoning)
    out: list[Rating] = []
    if not keys:
        return out
    template = load_prompt(JUDGE_PROMPT).text
    for judge in cfg.judges:
        if judge.backend == "lexical":
            lex = LexicalJudge(cfg.rating_max)
            out.extend(Rating(k, judge.name, "ok", lex.rate(reasoning[k])) for k in keys)
            continue
        from agl.inference.runner import RunOptions, complete_sync

        requests = [Request(sample_id=k, prompt=render_judge_prompt(template, reasoning[k],
                                                                    cfg.rating_max))
                    for k in keys]
        options = RunOptions(cache_dir=shared_path(cfg.judge_cache), concurrency=cfg.judge_concurrency,
                             timeout_s=cfg.judge_timeout_s, max_retries=cfg.judge_max_retries,
                             progress=False)
        replies = complete_sync(judge.backend, judge.model, requests, settings=judge.settings,
                                options=options)
        for k, reply in zip(keys, replies, strict=True):
            if reply.status is not ReplyStatus.OK:
                out.append(Rating(k, judge.name, "failed", None, reply.error))
                continue
            parsed = parse_ratings(reply.text, cfg.rating_max)
            out.append(Rating(k, judge.name, "ok" if parsed else "unparseable", parsed,
                              None if parsed else f"no valid ratings in: {(reply.text or '')[:200]}"))
    return out


def mean_ratings(ratings: Sequence[Rating], rating_max: int) -> dict[str, np.ndarray]:
    """Per clip, the mean over judges with a valid rating, scaled to [0, 1]."""
    by_key: dict[str, list[list[int]]] = {}
    for r in ratings:
        if r.ratings is not None:
            by_key.setdefault(r.key, []).append([r.ratings[c] for c in CATEGORY_COLUMNS])
    return {k: np.mean(np.asarray(v, dtype=float), axis=0) / rating_max for k, v in by_key.items()}


def krippendorff_alpha_interval(units: Sequence[Sequence[float | None]]) -> float:
    """Krippendorff's alpha, interval metric. `units`: per unit, one value per coder (None:
    missing). Units with fewer than two values are not pairable and are left out. NaN when no
    pairs exist or all values are equal (no variation to agree on)."""
    values = [[float(v) for v in u if v is not None and not math.isnan(v)] for u in units]
    values = [u for u in values if len(u) >= 2]
    n = sum(len(u) for u in values)
    if n < 2:
        return math.nan
    d_o = sum(
        sum((a - b) ** 2 for i, a in enumerate(u) for j, b in enumerate(u) if i != j) / (len(u) - 1)
        for u in values
    ) / n
    pooled = np.concatenate([np.asarray(u) for u in values])
    # Σ over ordered pairs of all pairable values of (v_c - v_k)^2 = 2n·Σv² − 2(Σv)²
    d_e = (2 * n * float(np.sum(pooled**2)) - 2 * float(np.sum(pooled)) ** 2) / (n * (n - 1))
    return math.nan if d_e == 0 else 1.0 - d_o / d_e


def agreement(ratings: Sequence[Rating], judges: Sequence[str]) -> dict[str, Any]:
    """Inter-judge agreement over (clip, category) units: alpha and mean pairwise Spearman."""
    from scipy.stats import spearmanr

    table: dict[tuple[str, str], dict[str, int]] = {}
    for r in ratings:
        if r.ratings is not None:
            for c in CATEGORY_COLUMNS:
                table.setdefault((r.key, c), {})[r.judge] = r.ratings[c]
    units = [[u.get(j) for j in judges] for u in table.values()]
    pairs = []
    for a in range(len(judges)):
        for b in range(a + 1, len(judges)):
            both = [(u[a], u[b]) for u in units if u[a] is not None and u[b] is not None]
            if len(both) >= 3:
                rho = spearmanr([x for x, _ in both], [y for _, y in both]).statistic
                if not math.isnan(rho):
                    pairs.append(float(rho))
    return {
        "judges": len(judges),
        "units": sum(sum(v is not None for v in u) >= 2 for u in units),
        "krippendorff_alpha_interval": (krippendorff_alpha_interval(units)
                                        if len(judges) >= 2 else None),
        "mean_pairwise_spearman": float(np.mean(pairs)) if pairs else None,
        "note": None if len(judges) >= 2 else "agreement needs at least two judges",
    }


# --- regression, scoring, selection ---------------------------------------------------------


def targets(errors_km: np.ndarray, gamma_km: float, cap_km: float) -> tuple[np.ndarray, np.ndarray]:
    """(good mask, y): y = 1 - e/γ on good clips, min(1, (e-γ)/(cap-γ)) on the rest."""
    errors_km = np.asarray(errors_km, dtype=float)
    good = errors_km < gamma_km
    y = np.where(good, 1.0 - errors_km / gamma_km,
                 np.minimum(1.0, (errors_km - gamma_km) / (cap_km - gamma_km)))
    return good, y


def fit_weights(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares of y on x without intercept: the a with y ≈ x·a, a ≥ 0."""
    from scipy.optimize import nnls

    return nnls(np.asarray(x, dtype=float), np.asarray(y, dtype=float))[0]


@dataclass(frozen=True)
class Weights:
    a: np.ndarray  # positive weights (good clips)
    a_bar: np.ndarray  # negative weights (bad clips)
    n_good: int
    n_bad: int

    @property
    def sets(self) -> list[str]:
        return ["P" if p > n else "N" if n > p else "neutral" for p, n in zip(self.a, self.a_bar,
                                                                             strict=True)]

    @property
    def signed(self) -> np.ndarray:
        """w_i = a_i on P, -ā_i on N, 0 otherwise: l_k = t_k · w."""
        return np.where(self.a > self.a_bar, self.a, np.where(self.a_bar > self.a, -self.a_bar, 0.0))

    def frame(self):
        import pandas as pd

        return pd.DataFrame({"category": list(CATEGORY_COLUMNS), "a": self.a, "a_bar": self.a_bar,
                             "set": self.sets, "weight": self.signed,
                             "n_good": self.n_good, "n_bad": self.n_bad})


def fit_localizability(x: np.ndarray, errors_km: np.ndarray, cfg: LocalizabilityConfig) -> Weights:
    """a_i from the clips with error < γ, ā_i from the rest (see the module docstring, 4)."""
    good, y = targets(errors_km, cfg.gamma_km, cfg.error_cap_km)
    n_good, n_bad = int(good.sum()), int((~good).sum())
    if min(n_good, n_bad) < cfg.min_clips_per_side:
        raise AglError(
            f"localizability: {n_good} fitted clip(s) have error < γ = {cfg.gamma_km:g} km and "
            f"{n_bad} do not; each side needs at least {cfg.min_clips_per_side} "
            "(change localizability.gamma_km or use a larger pool)")
    return Weights(fit_weights(x[good], y[good]), fit_weights(x[~good], y[~good]), n_good, n_bad)


def localizability(tags: np.ndarray, weights: Weights) -> np.ndarray:
    """l_k = Σ_P a_i t_ki − Σ_N ā_i t_ki for each row of `tags` (clips x categories)."""
    return np.asarray(tags, dtype=float) @ weights.signed


def select(keys: Sequence[str], l_k: np.ndarray, has_speech: np.ndarray, theta: float,
           target_size: int | None, speech_share: float) -> tuple[list[str], dict[str, Any]]:
    """Highly localizable clips (l_k > θ), speech-balanced, best first on each side."""
    keys = list(keys)
    l_k = np.asarray(l_k, dtype=float)
    has_speech = np.asarray(has_speech, dtype=bool)
    high = l_k > theta
    speech = sorted((i for i in range(len(keys)) if high[i] and has_speech[i]), key=lambda i: -l_k[i])
    other = sorted((i for i in range(len(keys)) if high[i] and not has_speech[i]),
                   key=lambda i: -l_k[i])
    if target_size is None:  # the largest set that keeps the share
        bounds = []
        if speech_share > 0:
            bounds.append(len(speech) / speech_share)
        if speech_share < 1:
            bounds.append(len(other) / (1 - speech_share))
        size = int(math.floor(min(bounds) + 1e-9))
    else:
        size = target_size
    want_speech = int(round(size * speech_share))
    want_other = size - want_speech
    chosen = speech[:want_speech] + other[:want_other]
    chosen.sort(key=lambda i: -l_k[i])
    info = {
        "highly_localizable": int(high.sum()),
        "target_size": size,
        "selected": len(chosen),
        "selected_speech": min(want_speech, len(speech)),
        "selected_no_speech": min(want_other, len(other)),
        "shortfall_speech": max(0, want_speech - len(speech)),
        "shortfall_no_speech": max(0, want_other - len(other)),
    }
    return [keys[i] for i in chosen], info


def holdout_split(keys: Sequence[str], fraction: float, seed: int) -> set[str]:
    """A seeded, order-independent held-out subset of `keys`."""
    ordered = sorted(keys)
    rng = np.random.default_rng(seed)
    n = int(round(len(ordered) * fraction))
    return {ordered[i] for i in rng.permutation(len(ordered))[:n]}


def rank_check(l_k: np.ndarray, errors_km: np.ndarray) -> dict[str, Any]:
    from scipy.stats import spearmanr

    if len(l_k) < 3 or np.ptp(l_k) == 0 or np.ptp(errors_km) == 0:
        return {"n": int(len(l_k)), "spearman_rho": None, "p_value": None,
                "note": "too few clips or no variation"}
    res = spearmanr(l_k, errors_km)
    return {"n": int(len(l_k)), "spearman_rho": float(res.statistic), "p_value": float(res.pvalue)}


# --- the whole stage's computation ----------------------------------------------------------


@dataclass
class LocalizabilityResult:
    weights: Weights
    clips: Any  # DataFrame, one row per tagged clip
    ratings: list[Rating]
    selected: list[str]
    summary: dict[str, Any]


def reference_errors(manifest, predictions: dict, missing_error_km: float):
    """Per manifest key: (error km or None, reasoning or None, status). See docstring, 2."""
    from agl.core.geo import geodesic_km

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

    split = ["holdout" if k in held else "fit" if k in set(fit_keys) else "unused" for k in keys]
    error = [ref[k][0] if k in ref else None for k in keys]
    chosen = set(selected)
    clips = pd.DataFrame({
        "key": keys, "l_k": l_k, "highly_localizable": l_k > cfg.theta, "has_speech": has_speech,
        "selected": [k in chosen for k in keys], "split": split,
        "reference_status": [ref[k][2] if k in ref else "absent" for k in keys],
        "error_km": error, "rated": [k in rated for k in keys],
    })
    for j, c in enumerate(CATEGORY_COLUMNS):
        clips[f"x_{c}"] = [x_of[k][j] if k in x_of else np.nan for k in keys]

    held_idx = [i for i, k in enumerate(keys) if k in held]
    fit_idx = [i for i, k in enumerate(keys) if k in set(fit_keys)]
    statuses = pd.Series([ref[k][2] if k in ref else "absent" for k in keys]).value_counts()
    rating_status = pd.Series([f"{r.judge}:{r.status}" for r in ratings]).value_counts()
    summary = {
        "clips": len(keys),
        "reference": {"answered": int(sum(k in ref for k in keys)),
                      "status": {str(k): int(v) for k, v in statuses.items()},
                      "with_reasoning": len(reasoning),
                      "failed_calls_left_out": int(sum(k in ref and ref[k][0] is None for k in keys))},
        "judges": {"names": [j.name for j in cfg.judges],
                   "clips_rated": len(rated),
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
        "selection": sel_info,
        "check_holdout": rank_check(l_k[held_idx], np.asarray([error[i] for i in held_idx], float)),
        "check_fit": rank_check(l_k[fit_idx], np.asarray([error[i] for i in fit_idx], float)),
    }
    return LocalizabilityResult(weights, clips, ratings, selected, summary)


def ratings_frame(ratings: Sequence[Rating]):
    import pandas as pd

    rows = [{"key": r.key, "judge": r.judge, "status": r.status,
             **{c: (r.ratings or {}).get(c) for c in CATEGORY_COLUMNS}, "error": r.error}
            for r in ratings]
    return pd.DataFrame(rows, columns=["key", "judge", "status", *CATEGORY_COLUMNS, "error"])
