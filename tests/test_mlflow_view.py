"""agl's saved view of the runs table (agl.core.mlflow_view): the experiment tag MLflow 3.17's
UI reads, written once per state, and the URL that opens it. The browser's side of it is
tests/test_mlflow_ui.py."""

from __future__ import annotations

import json

import mlflow

from agl.core.headline import RUN_HEADLINE, run_metric_keys
from agl.core.mlflow_view import DEFAULT_UI, VIEW_NAME, VIEW_TAG, runs_url, ui_base
from agl.core.tracking import save_runs_view


def _view(client, name="agl1k") -> dict:
    envelope = json.loads(client.get_experiment_by_name(name).tags[VIEW_TAG])
    return {**envelope, "state": json.loads(envelope["state"])}


def test_the_view_is_saved_once_per_state(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("AGL_MLFLOW_EXPERIMENT", raising=False)
    client = mlflow.MlflowClient(tracking_uri=uri)
    keys = run_metric_keys(["paper", "strict"])
    assert keys[:2] == ["paper.distance_error_km", "paper.median_km"] and len(keys) == 2 * len(RUN_HEADLINE)
    url = save_runs_view(keys, sort_by=keys[0])
    exp = client.get_experiment_by_name("agl1k")
    assert url == (f"{DEFAULT_UI}/#/experiments/{exp.experiment_id}/runs"
                   "?viewStateShareKey=agl-headline&workflowType=machine_learning")
    view = _view(client)
    assert view["name"] == VIEW_NAME
    assert view["state"]["selectedColumns"] == [f"metrics.`{k}`" for k in keys]
    assert view["state"]["columnOrder"] == view["state"]["selectedColumns"]
    assert (view["state"]["orderByKey"], view["state"]["orderByAsc"]) == ("metrics.`paper.distance_error_km`", True)
    # the same state again: the tag is left as it is (no new updatedAt)
    save_runs_view(keys, sort_by=keys[0])
    assert _view(client) == view
    # another protocol list: updated, its creation time kept
    save_runs_view(run_metric_keys(["paper"]), sort_by=keys[0])
    again = _view(client)
    assert again["createdAt"] == view["createdAt"] and again["updatedAt"] >= view["updatedAt"]
    assert len(again["state"]["selectedColumns"]) == len(RUN_HEADLINE)
    # a value that is no view (written by hand) is replaced, not a traceback
    client.set_experiment_tag(exp.experiment_id, VIEW_TAG, "not json")
    save_runs_view(keys, sort_by=keys[0])
    assert _view(client)["state"] == view["state"]


def test_the_ui_address_of_a_tracking_uri():
    assert ui_base("sqlite:///mlflow.db") == DEFAULT_UI  # opened with `mlflow ui`
    assert ui_base("postgresql+psycopg2://u:p@127.0.0.1:54329/mlflow") == DEFAULT_UI
    assert ui_base("http://127.0.0.1:5001") == "http://127.0.0.1:5001"
    # a served UI: no credentials in the printed link, no trailing slash
    assert ui_base("https://alice:s3cret@mlflow.example.org/team/") == "https://mlflow.example.org/team"
    assert runs_url("7", "http://127.0.0.1:5001/").startswith("http://127.0.0.1:5001/#/experiments/7/runs?")


def test_agl_mlflow_prints_the_link_and_saves_the_view(tmp_path, monkeypatch, capsys):
    from agl.cli import main
    from agl.core.tracking import log_run

    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.delenv("AGL_MLFLOW_EXPERIMENT", raising=False)
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the default experiment
    assert main(["mlflow"]) == 2
    assert f"MLflow (sqlite:///{db}): no such database" in capsys.readouterr().err
    assert not db.exists()  # asking created nothing
    # runs an older agl logged (no view yet): a strict-only one and a report's
    log_run(run_key="a", run_name="knn", params={}, metrics={"strict": {"distance_error_km": 9.0}})
    log_run(run_key="b", run_name="report", params={}, metrics={"runs": 2.0})
    assert main(["mlflow", "--experiment", "other"]) == 2
    assert "has no experiment 'other'" in capsys.readouterr().err
    assert main(["mlflow"]) == 0
    out = capsys.readouterr().out.splitlines()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("agl1k")
    assert out == [runs_url(exp.experiment_id),
                   f"(serve the store first: mlflow ui --backend-store-uri sqlite:///{db})"]
    assert _view(client)["state"]["selectedColumns"] == [f"metrics.`strict.{k}`" for _, k, _ in RUN_HEADLINE]
    # the params file's experiment is the default, as the evaluate stage logs to it
    (tmp_path / "params.yaml").write_text("mlflow:\n  experiment: elsewhere\n")
    assert main(["mlflow"]) == 2
    assert "has no experiment 'elsewhere'" in capsys.readouterr().err
