"""agl's MLflow experiments open on their runs: MLflow 3's UI picks an experiment's view by
its `mlflow.experimentKind` tag, and without one may open the GenAI (traces) view."""

from __future__ import annotations

import mlflow

from agl.core.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, log_run


def test_experiments_are_tagged_as_model_development(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    log_run(run_key="k1", run_name="knn", params={"k": 1}, metrics={"m": 1.0}, experiment="fresh")
    client = mlflow.MlflowClient(tracking_uri=uri)
    assert EXPERIMENT_KIND == "custom_model_development"  # the UI's value for the runs view
    assert client.get_experiment_by_name("fresh").tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    # An experiment made before (untagged) gets the tag on the next run; one a user tagged
    # keeps its kind.
    client.create_experiment("older")
    client.set_experiment_tag(client.create_experiment("chosen"), EXPERIMENT_KIND_TAG, "genai_development")
    for name in ("older", "chosen"):
        log_run(run_key="k2", run_name="prior", params={}, metrics={"m": 2.0}, experiment=name)
    assert client.get_experiment_by_name("older").tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert client.get_experiment_by_name("chosen").tags[EXPERIMENT_KIND_TAG] == "genai_development"
