"""Why a run's wrong predictions went wrong: the paper's seven error modes.

Two of the outcomes are decidable from the record alone: a Refusal (the model declined), and
a Failure (no usable reply: the call failed or the reply could not be read; not a mode of the
paper, and not the model's mistake). The other six modes (Bird Bias, Language Ambiguity,
Over-Commitment, Over-Reasoning, Label Misidentification, Educated Guess) need someone to
read the model's reasoning: a judge model, through any inference backend, with this
project's rubric `prompts/error-modes.txt`. Without a judge, or where the judge's answer is
unusable, a clip is reported as "Unjudged": a mode is never guessed.

"Wrong" (`is_wrong`): refused, failed, or the country is wrong; where the protocol does not
score the country, a distance above `wrong_km`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.contracts.calls import ReplyStatus, Request
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.inference.runner import RunOptions, complete_sync

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
MAX_REASONING_CHARS = 4000


@dataclass(frozen=True)
class JudgeConfig:
    """An inference backend used as the judge (`agl.inference.runner.complete_sync`)."""

    backend: str
    model: str
    settings: dict[str, Any]
    cache_dir: Path | None = None
    concurrency: int = 4
    timeout_s: float = 120
    max_retries: int = 5


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


def _place(city: Any, country: Any, continent: Any, lat: Any, lon: Any) -> str:
    names = [str(v) for v in (city, country, continent) if isinstance(v, str) and v.strip()]
    text = ", ".join(names) or "no place name"
    if isinstance(lat, float | int) and math.isfinite(lat) and math.isfinite(lon):
        text += f" ({lat:.3f}, {lon:.3f})"
    return text


def judge_prompt(row: pd.Series, reasoning: str) -> str:
    present = [c for c in CATEGORY_COLUMNS if float(row.get(c, 0) or 0) >= 0.1]
    d = row["distance_km"]
    fields = {
        "{true_place}": _place(row["true_city"], row["true_country"], row["true_continent"],
                               row["true_lat"], row["true_lon"]),
        "{categories}": ", ".join(present) or "none",
        "{predicted_place}": _place(row["pred_city"], row["pred_country"], row["pred_continent"],
                                    row["pred_lat"], row["pred_lon"]),
        "{distance}": f"{d:.0f} km off" if pd.notna(d) else "distance not scored",
        "{reasoning}": (reasoning or "(the model gave no reasoning)")[:MAX_REASONING_CHARS],
    }
    text = PROMPT_FILE.read_text(encoding="utf-8")
    for key, value in fields.items():  # str.replace: the rubric itself contains JSON braces
        text = text.replace(key, value)
    return text


_KEY = {re.sub(r"[^a-z]", "", m.lower()): m for m in JUDGE_MODES}


def parse_judgement(text: str | None) -> tuple[str | None, str]:
    """(mode, why) from a judge's reply; mode None when no valid mode can be read."""
    if not text:
        return None, "empty judge reply"
    match = re.search(r"\{.*\}", text, flags=re.S)
    if match:
        try:
            obj = json.loads(match.group(0))
            mode = _KEY.get(re.sub(r"[^a-z]", "", str(obj.get("mode", "")).lower()))
            if mode:
                return mode, str(obj.get("why", ""))[:500]
        except json.JSONDecodeError:
            pass
    return None, f"judge reply names no mode: {text[:200]!r}"


def classify(scored: pd.DataFrame, predictions: dict[str, Any] | None = None, *,
             run: str = "run", judge: JudgeConfig | None = None,
             wrong_km: float = 750.0) -> pd.DataFrame:
    """One row per wrong prediction: sample_id, mode, source (rule | judge | none), why."""
    wrong = scored[is_wrong(scored, wrong_km=wrong_km)]
    rows: list[dict[str, Any]] = []
    pending: list[tuple[int, pd.Series]] = []
    for _, row in wrong.iterrows():
        mode = deterministic_mode(row)
        if mode is not None:
            rows.append({"sample_id": row["sample_id"], "mode": mode, "source": "rule",
                         "why": f"status {row['status']}"})
        else:
            rows.append({"sample_id": row["sample_id"], "mode": UNJUDGED, "source": "none",
                         "why": "no judge configured"})
            pending.append((len(rows) - 1, row))
    if judge is not None and pending:
        _judge(rows, pending, predictions or {}, run, judge)
    return pd.DataFrame(rows, columns=["sample_id", "mode", "source", "why"])


def _judge(rows: list[dict], pending: list[tuple[int, pd.Series]], predictions: dict[str, Any],
           run: str, judge: JudgeConfig) -> None:

    requests = []
    for _, row in pending:
        p = predictions.get(row["sample_id"])
        reasoning = (getattr(p, "reasoning", None) or getattr(p, "raw_reply", None) or "")
        requests.append(Request(sample_id=f"{run}:{row['sample_id']}",
                                prompt=judge_prompt(row, reasoning)))
    options = RunOptions(cache_dir=judge.cache_dir, concurrency=judge.concurrency,
                         timeout_s=judge.timeout_s, max_retries=judge.max_retries, progress=False)
    replies = complete_sync(judge.backend, judge.model, requests, settings=judge.settings,
                            options=options)
    for (i, _), reply in zip(pending, replies, strict=True):
        if reply.status is not ReplyStatus.OK:
            rows[i].update(source="judge", why=f"judge call {reply.status}: {reply.error or ''}")
            continue
        mode, why = parse_judgement(reply.text)
        rows[i].update(mode=mode or UNJUDGED, source="judge", why=why)


def distribution(modes: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Counts per run (rows) and mode (columns, in the paper's order; empty modes kept)."""
    table = pd.DataFrame(
        {run: frame["mode"].value_counts() for run, frame in modes.items()}
    ).T.reindex(columns=list(ALL_MODES)).fillna(0).astype(int)
    table.index.name = "run"
    return table.loc[:, (table.sum(axis=0) > 0) | np.isin(table.columns, PAPER_MODES)]
