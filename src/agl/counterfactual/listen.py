"""listen@<model>-<intervention>: one model on every level of one derived dataset.

`listen_levels` is the stage's one call: for each level it has the model answer the clips (a
`run_model` callable the caller gives: the inference driver lives on a higher floor), refuses
a level where no clip succeeded, scores it (`score_level`, its metrics.json beside the scores)
and, with `config.track`, logs one MLflow run per level (`log_listen_run`), nested under the
model's run on the original clips where that exists. The pipeline's listen stage leaves the
logging to the track stage (`track_listen`: the same runs, read back from the files).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agl.core import canonical
from agl.core.checks import check_params, check_resamples
from agl.core.tracking import DEFAULT_EXPERIMENT, log_run, tracking_uri
from agl.dataset.checksums import read_source
from agl.dataset.manifest import ManifestWarning, content_hash, load_manifest
from agl.errors import AglError
from agl.scoring.clusters import DEFAULT_UNIT, parse_unit
from agl.scoring.config import BOOTSTRAP, check_fields, knob
from agl.scoring.evaluate import evaluate_frames, load_predictions_any

SUMMARY = "run_summary.json"  # the model run's summary in a level's folder (agl.inference.finalize.SUMMARY)
METRICS = "metrics.json"  # a level's metrics, as scored: what its MLflow run logs
KEYS = ("protocol", "level_bootstrap", "seed", "track", "resampling_unit")  # what the stage reads of `counterfactual:`

# (data folder, run folder) -> (the run's summary, its dry-run estimate as a dict)
RunModel = Callable[[Path, Path], tuple[dict[str, Any], dict[str, Any]]]


@dataclass(frozen=True)
class ListenConfig:
    """params.yaml `counterfactual:` (protocol, level_bootstrap, seed, track) and `mlflow:`."""

    # resamples per 95% CI of a level's metrics
    level_bootstrap: int = knob("counterfactual.level_bootstrap", BOOTSTRAP)
    protocol: str = "paper"
    seed: int = knob("counterfactual.seed", 0)
    resampling_unit: str = DEFAULT_UNIT  # what a level's CIs resample (agl.scoring.clusters)
    track: bool = True  # one MLflow run per level
    experiment: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "level_bootstrap", int(self.level_bootstrap))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "protocol", str(self.protocol))
        object.__setattr__(self, "resampling_unit",
                           parse_unit(self.resampling_unit, "counterfactual.resampling_unit").name)

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, mlflow: dict[str, Any] | None = None,
                    max_resamples: int | None = None, source: str = "params.yaml") -> ListenConfig:
        """From the keys of `counterfactual:` this stage reads (others are ignored); a count
        past `max_resamples` (evaluate.max_resamples) is one line naming it, before any work."""
        values = {k: v for k, v in (section or {}).items() if k in KEYS and v is not None}
        check_params("counterfactual", values, source)  # the one table (agl.core.checks.PARAMS)
        check_resamples({"counterfactual.level_bootstrap": (values.get("level_bootstrap", BOOTSTRAP), 1)},
                        max_resamples, source)
        return cls(**values, experiment=(mlflow or {}).get("experiment"))


def score_level(data: Path, run_dir: Path, config: ListenConfig) -> dict[str, Any]:
    """Score `run_dir/predictions.jsonl` against the derived manifest; writes
    `run_dir/scores_<protocol>.csv` (rounded, sorted) and returns the headline metrics."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        manifest = load_manifest(Path(data) / "manifest.csv", columns=["title"])
    preds = load_predictions_any(Path(run_dir) / "predictions.jsonl")
    result, scored = evaluate_frames(manifest, preds, config.protocol, bootstrap=config.level_bootstrap,
                                     seed=config.seed, unit=config.resampling_unit)
    scored = scored.sort_values("sample_id").round(
        {"distance_km": 3, "pred_lat": 6, "pred_lon": 6, "true_lat": 6, "true_lon": 6}
    )
    canonical.write_csv(scored, Path(run_dir) / f"scores_{config.protocol}.csv")
    return result


def _find_run_id(key: str, experiment: str | None) -> str | None:
    import mlflow  # heavy: only where a run is linked to its parent

    mlflow.set_tracking_uri(tracking_uri())
    client = mlflow.tracking.MlflowClient()
    exp = client.get_experiment_by_name(experiment or DEFAULT_EXPERIMENT)
    if exp is None:
        return None
    found = client.search_runs([exp.experiment_id], f"tags.`agl.run_key` = '{key}'", max_results=1)
    return found[0].info.run_id if found else None


def listen_run_key(model: str, intervention: str, level: str, version: str) -> str:
    """A level's MLflow key: model, intervention, level and the derived data's version."""
    return f"listen/{model}/{intervention}/{level}@{version[:16]}"


def log_listen_run(spec: Any, intervention: str, level: str, data: Path, run_dir: Path,
                   result: dict[str, Any], run: dict[str, Any], config: ListenConfig) -> str:
    """One MLflow run per (model, intervention, level), tagged with its parent dataset and
    intervention and nested under the model's run on the original data when it exists."""
    source = read_source(Path(data) / "lock.json") or {}
    iv = dict(source.get("intervention") or {})
    parent_version = str(source.get("parent_manifest_sha256", ""))
    version = content_hash(Path(data) / "manifest.csv")
    parent_run = _find_run_id(f"{spec.name}@{parent_version[:16]}", config.experiment)
    metrics = {k: v for k, v in result.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    metrics.update(
        {f"ci95.{k}.{i}": b for k, (lo, hi) in result.get("ci95", {}).items() for i, b in (("lo", lo), ("hi", hi))}
    )
    metrics.update({f"run.{k}": v for k, v in run.items() if isinstance(v, int | float) and not isinstance(v, bool)})
    tags = {
        "data_version": version,
        "parent_data_version": parent_version,
        "intervention": intervention,
        "intervention_kind": str(iv.get("kind", "")),
        "intervention_level": level,
        "model": spec.model,
        "backend": spec.backend,
        "parent_model_run": spec.name,
    }
    if parent_run:
        tags["mlflow.parentRunId"] = parent_run
    return log_run(
        run_key=listen_run_key(spec.name, intervention, level, version),
        run_name=f"{spec.name} x {intervention}/{level}",
        params={
            "model": spec.name,
            "backend": spec.backend,
            "protocol": config.protocol,
            **{f"intervention.{k}": v for k, v in iv.items()},
            "subset": source.get("subset"),
        },
        metrics=metrics,
        tags=tags,
        experiment=config.experiment,
        artifacts=[Path(run_dir) / "predictions.jsonl", Path(run_dir) / f"scores_{config.protocol}.csv"],
    )


def track_listen(spec: Any, intervention: str, perturb_dir: Path, out_dir: Path, summary_path: Path,
                 config: ListenConfig) -> list[str]:
    """Log the levels a listen stage wrote (each level's metrics.json, the stage's summary and
    its timings, read back) as `listen_levels` would have: one MLflow run per level. Returns
    the runs' keys."""
    if not Path(summary_path).is_file():
        raise AglError(f"{summary_path}: not found; run listen@{spec.name}-{intervention} first")
    summary = json.loads(Path(summary_path).read_text())
    timings_file = canonical.timings_path(summary_path)
    # this session's requests and spend: absent after a `dvc pull` (run history is not cached)
    timings = json.loads(timings_file.read_text()).get("levels", {}) if timings_file.is_file() else {}
    keys = []
    for level, row in sorted(summary["levels"].items()):
        out = Path(out_dir) / level
        if not (out / METRICS).is_file():
            raise AglError(f"{out / METRICS}: not found; `dvc repro -f listen@{spec.name}-{intervention}` "
                           "writes it")
        result = json.loads((out / METRICS).read_text())
        session = timings.get(level, {})
        run = {"n_failed": row["n_failed"], "cost_usd": row["cost_usd"],
               **{f"session_{k}": session[k] for k in ("requests", "cache_hits", "cost_usd") if k in session}}
        data = Path(perturb_dir) / level
        log_listen_run(spec, intervention, level, data, out, result, run, config)
        keys.append(listen_run_key(spec.name, intervention, level, content_hash(data / "manifest.csv")))
    return keys


def listen_levels(spec: Any, intervention: str, perturb_dir: Path, out_dir: Path, config: ListenConfig,
                  run_model: RunModel) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every level under `perturb_dir`: run, score, log. Returns the stage's summary (what
    data, params and code decide) and its timings (this session's estimate, requests, cache
    hits and spend: run history, kept out of the summary)."""
    model = spec.name
    if not Path(perturb_dir).is_dir():  # one line, not a traceback from iterdir
        raise AglError(f"{perturb_dir}: not found; run perturb@{intervention} first")
    levels = sorted(d.name for d in Path(perturb_dir).iterdir() if (d / "manifest.csv").exists())
    if not levels:
        raise AglError(f"{perturb_dir}: no derived dataset; run perturb@{intervention} first")
    summary: dict[str, Any] = {"model": model, "intervention": intervention, "protocol": config.protocol,
                               "levels": {}}
    timings: dict[str, Any] = {"levels": {}}
    for level in levels:
        data, out = Path(perturb_dir) / level, Path(out_dir) / level
        run, estimate = run_model(data, out)
        if run["n_recorded"] and run["n_failed"] == run["n_recorded"]:  # no result to score
            raise AglError(f"listen {model} x {intervention}/{level}: no clip succeeded (all "
                           f"{run['n_failed']} failed; see {out}/predictions.jsonl); fix the "
                           f"cause, then `dvc repro listen@{model}-{intervention}`")
        (out / SUMMARY).unlink(missing_ok=True)  # timings: kept out of the DVC-cached folder
        result = score_level(data, out, config)
        canonical.write_json(out / METRICS, result)  # what the level's MLflow run logs (track_listen)
        timings["levels"][level] = {"estimate_before_run": estimate,
                                    "requests": run["session_requests"],
                                    "cache_hits": run["session_cache_hits"],
                                    "cost_usd": run.get("session_cost_usd", 0.0)}
        summary["levels"][level] = {
            "n": result["n"],
            "distance_error_km": round(result["distance_error_km"], 3),
            "country_acc": round(result["country_acc"], 6),
            "continent_acc": round(result["continent_acc"], 6),
            "cost_usd": round(run["cost_usd"], 6),
            "n_failed": run["n_failed"],
        }
        if config.track:
            log_listen_run(spec, intervention, level, data, out, result, run, config)
    return summary, timings
