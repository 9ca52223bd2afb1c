"""MLflow tracking: one run per (model, data version), updated in place when re-evaluated.

The tracking URI is `MLFLOW_TRACKING_URI` or `sqlite:///mlflow.db` in the repository root
(the file store is refused by MLflow >= 3.13). A run is found again by its `agl.run_key`
tag, so re-logging the same inputs updates that run instead of adding a duplicate.
Secrets never reach MLflow: params and tags are checked against the environment's API keys.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_EXPERIMENT = "agl1k"
SECRET_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET")


def tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI`, else the repository's mlflow.db (the real repository's when in a
    queued experiment's temporary workspace: see agl.workspace)."""
    from agl.workspace import shared_root

    root = shared_root() or REPO_ROOT
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


def git_commit(cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd or REPO_ROOT, capture_output=True, text=True,
            timeout=10,
        )
        commit = out.stdout.strip() if out.returncode == 0 else "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd or REPO_ROOT,
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return commit + ("-dirty" if dirty and commit != "unknown" else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _secrets() -> list[str]:
    return [
        v for k, v in os.environ.items()
        if v and len(v) >= 8 and any(k.upper().endswith(s) for s in SECRET_ENV_SUFFIXES)
    ]


def scrub(value: Any) -> Any:
    """Replace any API key found in a value by a marker (recursively)."""
    secrets = _secrets()
    if not secrets:
        return value

    def clean(v: Any) -> Any:
        if isinstance(v, str):
            for s in secrets:
                v = v.replace(s, "[redacted]")
            return v
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return type(v)(clean(x) for x in v)
        return v

    return clean(value)


def _mlflow():
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri())
    return mlflow


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def log_run(
    *,
    run_key: str,
    run_name: str,
    params: dict[str, Any],
    metrics: dict[str, Any],
    artifacts: Iterable[Path] = (),
    tags: dict[str, str] | None = None,
    experiment: str | None = None,
) -> str:
    """Create or update the MLflow run identified by `run_key`; returns its run id.

    Non-finite and non-numeric metric values are skipped (MLflow cannot store NaN
    meaningfully); nested dicts are flattened with dots (`ci95.country_acc.lo`).
    """
    mlflow = _mlflow()
    client = mlflow.tracking.MlflowClient()
    name = experiment or os.environ.get("AGL_MLFLOW_EXPERIMENT") or DEFAULT_EXPERIMENT
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(name)
    found = client.search_runs(
        [exp_id], filter_string=f"tags.`agl.run_key` = '{run_key}'", max_results=1
    )
    run_id = found[0].info.run_id if found else None
    flat_params = {k: str(v)[:6000] for k, v in _flatten(scrub(params)).items()}
    flat_metrics = {
        k: float(v)
        for k, v in _flatten(metrics).items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    all_tags = {"agl.run_key": run_key, "git_commit": git_commit(), **scrub(tags or {})}
    with mlflow.start_run(run_id=run_id, experiment_id=exp_id, run_name=run_name) as run:
        # Params are immutable in MLflow; a changed value means a different run key upstream.
        existing = client.get_run(run.info.run_id).data.params if run_id else {}
        new_params = {k: v for k, v in flat_params.items() if k not in existing}
        if new_params:
            mlflow.log_params(new_params)
        changed = {k: v for k, v in flat_params.items() if k in existing and existing[k] != v}
        for k, v in changed.items():
            mlflow.set_tag(f"param_update.{k}", v)
        if flat_metrics:
            mlflow.log_metrics(flat_metrics)
        mlflow.set_tags(all_tags)
        if tags and tags.get("data_version") and not (run_id and _has_input(client, run_id)):
            _log_dataset(mlflow, tags)
        for path in artifacts:
            path = Path(path)
            if path.is_dir():
                mlflow.log_artifacts(str(path), artifact_path=path.name)
            elif path.exists():
                mlflow.log_artifact(str(path))
        return run.info.run_id


def _has_input(client: Any, run_id: str) -> bool:
    return bool(client.get_run(run_id).inputs.dataset_inputs)


def _log_dataset(mlflow: Any, tags: dict[str, str]) -> None:
    """The data a run was scored on, as an MLflow dataset input: its name (`dataset` tag) and
    content hash (`data_version`), so runs on the same data group together in the UI."""
    import warnings

    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = resolve_dataset_source(str(tags.get("data_source", "data/manifest.csv")))
        ds = MetaDataset(source=source,
                         name=str(tags.get("dataset") or "manifest")[:500],
                         digest=str(tags["data_version"])[:36])
        mlflow.log_input(ds, context="evaluation")


def log_artifacts(run_id: str, paths: Iterable[Path], artifact_path: str | None = None) -> None:
    mlflow = _mlflow()
    client = mlflow.tracking.MlflowClient()
    for path in paths:
        path = Path(path)
        if path.is_dir():
            client.log_artifacts(run_id, str(path), artifact_path=artifact_path or path.name)
        elif path.exists():
            client.log_artifact(run_id, str(path), artifact_path=artifact_path)
