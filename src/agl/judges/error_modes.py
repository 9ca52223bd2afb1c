"""The error-mode judge: a model that reads each wrong prediction's reasoning and names its mode.

Run by the stage `judge` (stages/judge.py, `judge_runs`): `judge_run` reads one evaluated run (its
`scores_<protocol>.csv` and `predictions.jsonl`), decides Refusal and Failure from the record
(`agl.judges.modes.classify`), asks the judge (params.yaml `report.judge`, any inference
backend, the rubric `prompts/error-modes.txt`) for the other wrong predictions, and writes one
table: sample_id, mode, source (rule | judge | none), why. Without a judge the table holds the
rule's rows and "Unjudged" for the rest, and no model is called. DVC caches the table, so a
report that changes re-reads it instead of calling the judge again.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from agl.contracts.calls import ReplyStatus, Request
from agl.core import canonical
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError
from agl.inference import roster
from agl.inference.runner import RunOptions
from agl.inference.runner_sync import complete_sync
from agl.inference.spend import OUTPUT_LIMITS
from agl.judges.modes import (
    COLUMNS,
    JUDGE_MODES,
    PROMPT_FILE,
    UNJUDGED,
    JudgeConfig,
    classify,
    is_wrong,
    judge_from_config,
)
from agl.predictions.records import read_predictions

MAX_REASONING_CHARS = 4000


THINKING_KEYS = ("thinking_budget", "thinking_level", "reasoning_effort")


def room_to_think(backend: str, model: str, settings: dict[str, Any]) -> None:
    """The roster's room to think, for the judge (its thinking counts against its output
    limit as a listener's does): a model the roster pins thinking for (controlled protocol)
    must have the same keys pinned here; a judge that thinks sets an output limit; the limit
    must be above the budget (`agl.inference.roster.room_to_think`). Checked where a judge is
    run (the judge stage, `agl report --judge-*`); the report stage only reads its tables."""
    where = "params report.judge.settings"
    for entry in roster.load_roster():
        pinned = entry.spec.settings
        if (entry.spec.backend, entry.spec.model) != (backend, model) or not any(
                k in pinned for k in THINKING_KEYS):
            continue
        unset = {k: pinned[k] for k in (*THINKING_KEYS, *OUTPUT_LIMITS)
                 if k in pinned and k not in settings}
        if unset:
            raise AglError(f"{where}: {model} thinks, and its thinking counts against its output "
                           f"limit; pin {', '.join(unset)} as the roster does (e.g. "
                           + ", ".join(f"{k}: {v}" for k, v in unset.items()) + ")")
        break
    budget = settings.get("thinking_budget")
    thinks = (isinstance(budget, int) and budget > 0) or any(
        settings.get(k) not in (None, "none", "minimal") for k in THINKING_KEYS[1:])
    if thinks and not any(k in settings for k in OUTPUT_LIMITS):
        raise AglError(f"{where}: a thinking judge needs an output limit above its thinking "
                       f"(set max_output_tokens or max_completion_tokens; the roster gives "
                       "thinking_budget 2048 a limit of 2560)")
    roster.room_to_think(settings, where)


@dataclass(frozen=True)
class ErrorModeJudgeConfig:
    """What the judge stage reads: params.yaml `report.protocol`, `report.wrong_km` (the
    report's rule of a wrong prediction) and `report.judge` (None: no judge, no call)."""

    protocol: str = "paper"
    wrong_km: float = 750.0
    judge: JudgeConfig | None = None

    def __post_init__(self) -> None:
        if self.protocol not in ("paper", "strict"):
            raise AglError(f"params report.protocol: {self.protocol!r} is not paper or strict")
        if not (isinstance(self.wrong_km, float | int) and math.isfinite(self.wrong_km) and self.wrong_km >= 0):
            raise AglError(f"params report.wrong_km: {self.wrong_km!r} is not a distance in km (>= 0)")
        if self.judge is not None:
            room_to_think(self.judge.backend, self.judge.model, self.judge.settings)

    @classmethod
    def from_params(cls, protocol: str, wrong_km: Any, judge: dict[str, Any] | None) -> ErrorModeJudgeConfig:
        """From the report section's `protocol`, `wrong_km` and `judge` (null: no judge)."""
        try:
            km = float(wrong_km)
        except (TypeError, ValueError):
            raise AglError(f"params report.wrong_km: {wrong_km!r} is not a float") from None
        return cls(protocol=str(protocol), wrong_km=km, judge=judge_from_config(judge))


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


def judge_modes(scored: pd.DataFrame, predictions: dict[str, Any] | None, *, run: str,
                config: ErrorModeJudgeConfig) -> pd.DataFrame:
    """One row per wrong prediction (`agl.judges.modes.classify`), the judge's mode filled in
    where the record does not decide it (no call without a judge, or with nothing to judge)."""
    frame = classify(scored, wrong_km=config.wrong_km)
    pending = [i for i, source in enumerate(frame["source"]) if source == "none"]
    if config.judge is None or not pending:
        return frame
    rows = frame.to_dict(orient="records")
    wrong = scored[is_wrong(scored, wrong_km=config.wrong_km)]  # classify's rows, in its order
    _judge(rows, [(i, wrong.iloc[i]) for i in pending], predictions or {}, run, config.judge)
    return pd.DataFrame(rows, columns=list(COLUMNS))


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
        if reply.status is ReplyStatus.TRUNCATED:  # its limit cut it (thinking counts): not a verdict
            rows[i].update(source="judge", why=(
                f"judge reply truncated: cut at the output limit (finish_reason "
                f"{reply.extra.get('finish_reason')}); raise the judge's max output tokens "
                "above its thinking"))
            continue
        if reply.status is not ReplyStatus.OK:
            rows[i].update(source="judge", why=f"judge call {reply.status}: {reply.error or ''}")
            continue
        mode, why = parse_judgement(reply.text)
        rows[i].update(mode=mode or UNJUDGED, source="judge", why=why)


def judge_run(run_dir: Path, out_csv: Path, config: ErrorModeJudgeConfig) -> pd.DataFrame:
    """Judge one evaluated run folder (`<run>/scores_<protocol>.csv`, `predictions.jsonl`,
    `metrics.json` for its name) and write the table to `out_csv`; returns it."""
    run_dir = Path(run_dir)
    scores = run_dir / f"scores_{config.protocol}.csv"
    if not scores.exists():
        raise AglError(f"{scores}: no scores; run the evaluate stage first (dvc repro evaluate)")
    metrics = run_dir / "metrics.json"
    name = run_dir.name
    if metrics.exists():
        name = str(json.loads(metrics.read_text()).get("run") or name)
    scored = pd.read_csv(scores, keep_default_na=True)
    for col in ("refused", "failed"):  # as the report reads them (agl.report.inputs.collect_runs)
        scored[col] = scored[col].astype(str).str.lower().eq("true")
    preds_path = run_dir / "predictions.jsonl"
    predictions = read_predictions(preds_path) if preds_path.exists() else None
    frame = judge_modes(scored, predictions, run=name, config=config)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(frame, out_csv)
    return frame


def judge_runs(roots: list[Path], judges_dir: Path, config: ErrorModeJudgeConfig) -> list[Path]:
    """Judge every evaluated run under `roots` (`<root>/<run>/scores_<protocol>.csv`) into
    `<judges_dir>/<run>/error_modes.csv`, where the report looks (`agl report --judge-*`)."""
    written = []
    for root in roots:
        if not Path(root).is_dir():
            raise AglError(f"{root}: no such folder of evaluated runs; run the evaluate stages first "
                           "(dvc repro evaluate)")
        for scores in sorted(Path(root).glob(f"*/scores_{config.protocol}.csv")):
            metrics = scores.parent / "metrics.json"
            name = scores.parent.name
            if metrics.exists():
                name = str(json.loads(metrics.read_text()).get("run") or name)
            out = Path(judges_dir) / name / "error_modes.csv"
            judge_run(scores.parent, out, config)
            written.append(out)
    return written
