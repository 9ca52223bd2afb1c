"""The track stage: every model run the pipeline scored, logged to MLflow in one process.

The evaluate and listen stages write what they scored and log nothing; this logs each from
its files as those stages' functions log it when called alone (`agl evaluate`: the same run
key, params, metrics, tags and artifacts; `track_evaluated`, `track_listen`). Why one stage:
importing MLflow and opening its store costs a process about 5 s of CPU, which seven stages
paid on the demo. The model runs go first, so each listen run nests under its model's run.
(localize logs its own run: a sensitivity sweep queues it alone, one experiment per point.)

The stage's output is a receipt (`receipt`): what was logged, named by content, never by
MLflow's run ids. It is what makes a fresh clone's `dvc repro` log the runs: a stage with
no output whose inputs come out bit for bit as the lock says would count as done.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agl.contracts.models import ModelSpec
from agl.counterfactual.listen import ListenConfig, track_listen
from agl.errors import AglError
from agl.inference.runspec import with_default_model
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import save_view, track_evaluated


@dataclass(frozen=True)
class TrackInputs:
    """What the track stage reads: the scored runs and the listen stages' levels."""

    manifest: Path
    runs: Path  # build/runs: <run>/metrics.json for each evaluated run
    listen: Path | None = None  # build/listen: <model>/<intervention>.json and its levels
    perturb: Path | None = None  # build/perturb: the derived datasets the levels listened to
    listened: tuple[tuple[str, str], ...] = ()  # (model, intervention): counterfactual.models x .interventions
    leaderboard: Path | None = None  # build/leaderboard.csv: each run's rank, logged for the runs table


@dataclass(frozen=True)
class TrackConfig:
    """The logging settings of the stages whose runs are logged here."""

    evaluate: EvaluateConfig
    listen: ListenConfig


def track_pipeline(inputs: TrackInputs, specs: list[ModelSpec], config: TrackConfig) -> tuple[dict[str, Any], str]:
    """Log every evaluated run of `specs` (params.yaml `models:`) and every listen level;
    returns the receipt (what was logged: run names and data versions) and the runs table's URL."""
    logged: dict[str, Any] = {"runs": {}, "listen": {}}
    ranks = leaderboard_ranks(inputs.leaderboard) if inputs.leaderboard is not None else None
    for spec in specs if config.evaluate.track else ():  # evaluate.track: false logs no run
        run_dir = inputs.runs / spec.name
        if not (run_dir / "metrics.json").is_file():
            raise AglError(f"{run_dir / 'metrics.json'}: not found; run `dvc repro evaluate@{spec.name}` first")
        info = {k: v for k, v in asdict(spec).items() if isinstance(v, str | int | float) and k != "name"}
        version = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")).get("data_version")
        rank = (ranks or {}).get((spec.name, version))
        logged["runs"][spec.name] = track_evaluated(run_dir, inputs.manifest, config.evaluate, info=info,
                                                    rank=rank)
    by_name = {s.name: s for s in specs}
    listened = inputs.listened if config.listen.track else ()
    if listened and (inputs.listen is None or inputs.perturb is None):
        raise AglError("the listen and perturb folders are needed to log the listen runs")
    for model, intervention in listened:
        if model not in by_name:
            raise AglError(f"params.yaml counterfactual.models: '{model}' is not under models:")
        out = inputs.listen / model / intervention
        logged["listen"][f"{model}-{intervention}"] = track_listen(
            with_default_model(by_name[model]), intervention, inputs.perturb / intervention, out,
            out.with_suffix(".json"), config.listen)
    return logged, save_view(config.evaluate, ranked=ranks is not None)


def leaderboard_ranks(path: Path) -> dict[tuple[str, str], int]:
    """(run, data version) -> the leaderboard's rank (build/leaderboard.csv; its protocol is
    leaderboard.protocol): one ranking rule, the leaderboard's, for MLflow's runs table too.
    An unranked run has none."""
    import pandas as pd

    if not path.is_file():
        raise AglError(f"{path}: not found; run `dvc repro leaderboard` first")
    frame = pd.read_csv(path, dtype={"run": str, "data_version": str})
    if not {"run", "data_version", "rank"} <= set(frame.columns):
        raise AglError(f"{path}: no run, data_version and rank columns; is it the leaderboard's CSV?")
    ranked = frame[frame["rank"].notna()]
    return {(str(r), str(v)): int(k) for r, v, k in zip(ranked["run"], ranked["data_version"],
                                                         ranked["rank"], strict=True)}
