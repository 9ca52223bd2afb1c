"""The track stage: every run the pipeline scored, logged to MLflow in one process.

The evaluate, listen and localize stages write what they scored and log nothing; this logs
each from its files, as those stages' own functions log it when called alone (`agl evaluate`,
`agl listen`...: `track_evaluated`, `track_listen`, `track_localize` give the same run key,
params, metrics, tags and artifacts). Why one stage: importing MLflow and opening its store
costs a process about 5 s of CPU; eight logging stages paid it eight times on the demo.
Order: the model runs first, so each listen run nests under its model's run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agl.contracts.models import ModelSpec
from agl.counterfactual.listen import ListenConfig, track_listen
from agl.curation.localize import LocalizeFiles, track_localize
from agl.errors import AglError
from agl.inference.runspec import with_default_model
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import save_view, track_evaluated


@dataclass(frozen=True)
class TrackInputs:
    """What the track stage reads: the scored runs, the listen stages' levels, localize's files."""

    manifest: Path
    runs: Path  # build/runs: <run>/metrics.json for each evaluated run
    listen: Path | None = None  # build/listen: <model>/<intervention>.json and its levels
    perturb: Path | None = None  # build/perturb: the derived datasets the levels listened to
    localize: LocalizeFiles | None = None
    listened: tuple[tuple[str, str], ...] = ()  # (model, intervention): counterfactual.models x .interventions


@dataclass(frozen=True)
class TrackConfig:
    """The logging settings of the stages whose runs are logged here."""

    evaluate: EvaluateConfig
    listen: ListenConfig
    localizability: dict[str, Any]  # params.yaml `localizability:`, as the localize stage read it


def track_pipeline(inputs: TrackInputs, specs: list[ModelSpec], config: TrackConfig) -> dict[str, Any]:
    """Log every evaluated run of `specs` (params.yaml `models:`), every listen level and the
    localizability run; returns what was logged and the runs table's URL."""
    logged: dict[str, Any] = {"runs": [], "levels": 0, "localize": None}
    for spec in specs if config.evaluate.track else ():  # evaluate.track: false logs no run
        run_dir = inputs.runs / spec.name
        if not (run_dir / "metrics.json").is_file():
            raise AglError(f"{run_dir / 'metrics.json'}: not found; run `dvc repro evaluate@{spec.name}` first")
        info = {k: v for k, v in asdict(spec).items() if isinstance(v, str | int | float) and k != "name"}
        track_evaluated(run_dir, inputs.manifest, config.evaluate, info=info)
        logged["runs"].append(spec.name)
    by_name = {s.name: s for s in specs}
    levels = 0
    for model, intervention in inputs.listened if config.listen.track else ():
        if model not in by_name:
            raise AglError(f"params.yaml counterfactual.models: '{model}' is not under models:")
        if inputs.listen is None or inputs.perturb is None:
            raise AglError("the listen and perturb folders are needed to log the listen runs")
        out = inputs.listen / model / intervention
        levels += len(track_listen(with_default_model(by_name[model]), intervention, inputs.perturb / intervention,
                                   out, out.with_suffix(".json"), config.listen))
    logged["levels"] = levels
    if inputs.localize is not None:
        track_localize(inputs.localize, config.localizability)
        logged["localize"] = str(inputs.localize.summary)
    logged["mlflow_url"] = save_view(config.evaluate)
    return logged
