"""The localizability judges: who rates each category's contribution to a clip's reasoning.

A judge reads the reference model's reasoning for a clip and rates every AGL1K category on
0..`rating_max` (`agl.curation.localizability`, step 3): the offline `lexical` judge counts
vocabulary terms; any inference backend can judge through the runner (cached). `agreement`
reports Krippendorff's alpha and the mean pairwise Spearman correlation between judges.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from agl.contracts.calls import ReplyStatus, Request
from agl.core.workspace import shared_path
from agl.curation.localizability_params import LocalizabilityConfig
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.inference.runner import RunOptions
from agl.inference.runner_sync import complete_sync
from agl.predictions.importer import NO_REASONING  # the authors' stand-in text in published files
from agl.prompts import load_prompt

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


def has_reasoning(text: str | None) -> bool:
    """Whether there is reasoning text to rate (not empty, not the importer's stand-in)."""
    return bool(text and text.strip() and text.strip() != NO_REASONING)


def load_vocabulary() -> dict[str, list[str]]:
    """The lexical judge's terms per category (`data/localizability_vocabulary.json`)."""
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
        """Per category: distinct vocabulary terms found in the reasoning, capped."""
        return {c: min(self.rating_max, sum(bool(p.search(reasoning)) for p in pats))
                for c, pats in self.patterns.items()}


def render_judge_prompt(template: str, reasoning: str, rating_max: int) -> str:
    """The judge prompt for one clip: the rubric with the categories, scale and reasoning."""
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
