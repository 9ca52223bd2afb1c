"""Why a run's wrong predictions went wrong: the paper's seven error modes, the rules part.

Two of the outcomes are decidable from the record alone: a Refusal (the model declined), and
a Failure (no usable reply: the call failed or the reply could not be read; not a mode of the
paper, and not the model's mistake). The other six modes (Bird Bias, Language Ambiguity,
Over-Commitment, Over-Reasoning, Label Misidentification, Educated Guess) need someone to
read the model's reasoning: a judge model, through any inference backend, with this
project's rubric `prompts/error-modes.txt`. Without a judge, or where the judge's answer is
unusable, a clip is reported as "Unjudged": a mode is never guessed.

"Wrong" (`is_wrong`): refused, failed, or the country is wrong; where the protocol does not
score the country, a distance above `wrong_km`.

This module calls no model: the judge that does is `agl.judges.error_modes` (the stage
`judge`); the report reads its table and counts the modes here (`distribution`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.core.checks import check_value
from agl.errors import AglError

REFUSAL = "Refusal"
FAILURE = "Failure"
UNJUDGED = "Unjudged"
JUDGE_MODES: tuple[str, ...] = (
    "Bird Bias",
    "Language Ambiguity",
    "Over-Commitment",
    "Over-Reasoning",
    "Label Misidentification",
    "Educated Guess",
)
PAPER_MODES: tuple[str, ...] = (*JUDGE_MODES, REFUSAL)
ALL_MODES: tuple[str, ...] = (*PAPER_MODES, FAILURE, UNJUDGED)
PROMPT_FILE = Path(__file__).parents[1] / "prompts" / "error-modes.txt"
COLUMNS = ("sample_id", "mode", "source", "why")
DEFAULT_CACHE = "cache/judges"  # the judge's replies, as cache/responses holds the listeners'


@dataclass(frozen=True)
class JudgeConfig:
    """An inference backend used as the judge (params.yaml `report.judge`; run by
    `agl.judges.error_modes` through `agl.inference.runner_sync.complete_sync`)."""

    backend: str
    model: str
    settings: dict[str, Any]
    cache_dir: Path | None = None
    concurrency: int = 4
    timeout_s: float = 120
    max_retries: int = 5


def judge_from_config(cfg: dict[str, Any] | None) -> JudgeConfig | None:
    """A JudgeConfig from the params' `report.judge` mapping (None: no judge)."""
    if not cfg:
        return None
    if not isinstance(cfg, dict):
        raise AglError(f"params report.judge: {cfg!r} is not a mapping; set judge: {{backend: ..., "
                       "model: ...}, or judge: null for no judge")
    missing = [k for k in ("backend", "model") if not cfg.get(k)]
    if missing:
        raise AglError(f"params report.judge: set {', '.join(missing)} (or judge: null)")
    # One judge stage reads every run: its reply cache is what keeps a rerun after a new run
    # from asking again about the others (null: no cache, every rerun asks again).
    cache = cfg.get("cache_dir", DEFAULT_CACHE)
    if cache is not None and not (isinstance(cache, str) and cache.strip()):
        raise AglError(f"params report.judge.cache_dir: {cache!r} is not a folder; e.g. "
                       f"`cache_dir: {DEFAULT_CACHE}`, or null for no reply cache")
    # Counts are whole numbers: `concurrency: 1.5` was cut to 1 without a word (issue 50).
    for key, rule, default in (("concurrency", "count", 4), ("max_retries", "count0", 5),
                               ("timeout_s", "positive", 120)):
        check_value(key, cfg.get(key, default), "params report.judge:", rule=rule, example=str(default))
    return JudgeConfig(backend=str(cfg["backend"]), model=str(cfg["model"]),
                       settings=dict(cfg.get("settings") or {}),
                       cache_dir=Path(cache) if cache else None,
                       concurrency=int(cfg.get("concurrency", 4)),
                       timeout_s=float(cfg.get("timeout_s", 120)),
                       max_retries=int(cfg.get("max_retries", 5)))


def prompt_version() -> str:
    """SHA-256 prefix of the rubric, logged with every judged run."""
    return hashlib.sha256(PROMPT_FILE.read_bytes()).hexdigest()[:12]


def is_wrong(scored: pd.DataFrame, *, wrong_km: float = 750.0) -> pd.Series:
    """Per score row: refused, failed, or the wrong country; where the protocol does not
    score the country, a distance above `wrong_km` (the report's and the explorer's rule)."""
    country = scored["country_correct"]
    far = scored["distance_km"].fillna(-1.0) > wrong_km
    return (scored["refused"].astype(bool) | scored["failed"].astype(bool)
            | (country == 0) | (country.isna() & far))


def deterministic_mode(row: pd.Series) -> str | None:
    """Refusal / Failure where the record decides it, else None (a judge must read it)."""
    if bool(row["failed"]):
        return FAILURE
    if bool(row["refused"]) or str(row["status"]) == "refused":
        return REFUSAL
    return None


def classify(scored: pd.DataFrame, *, wrong_km: float = 750.0) -> pd.DataFrame:
    """One row per wrong prediction: sample_id, mode, source (rule | none), why. The record
    decides Refusal and Failure; every other wrong prediction is "Unjudged" with source
    "none", for a judge (`agl.judges.error_modes`) to read."""
    wrong = scored[is_wrong(scored, wrong_km=wrong_km)]
    rows: list[dict[str, Any]] = []
    for _, row in wrong.iterrows():
        mode = deterministic_mode(row)
        if mode is not None:
            rows.append({"sample_id": row["sample_id"], "mode": mode, "source": "rule",
                         "why": f"status {row['status']}"})
        else:
            rows.append({"sample_id": row["sample_id"], "mode": UNJUDGED, "source": "none",
                         "why": "no judge configured"})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def distribution(modes: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Counts per run (rows) and mode (columns, in the paper's order; empty modes kept)."""
    table = pd.DataFrame(
        {run: frame["mode"].value_counts() for run, frame in modes.items()}
    ).T.reindex(columns=list(ALL_MODES)).fillna(0).astype(int)
    table.index.name = "run"
    return table.loc[:, (table.sum(axis=0) > 0) | np.isin(table.columns, PAPER_MODES)]
