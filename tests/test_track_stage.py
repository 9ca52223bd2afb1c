"""The track stage logs, from the files, exactly what the stages used to log themselves.

`evaluate_run` (as `agl evaluate` calls it) scores and logs in one go; the pipeline's evaluate
stage only scores, and the track stage (agl.tracking.pipeline) logs the run afterwards from
its folder. Both must give MLflow the same run: the same key, params, metrics, tags and
artifacts. (The demo pipeline's end-to-end test checks the stage itself, listen runs nested
under their model's run included.)
"""

from __future__ import annotations

import json
import warnings

import pytest
from test_localizability import CATEGORY_COLUMNS, synthetic_pool

from agl.errors import AglError


def _run_folder(tmp_path):
    """A scored-to-be run: predictions.jsonl in its folder, and the manifest it answers."""
    from agl.dataset.manifest import write_manifest
    from agl.predictions.records import write_predictions

    manifest, tags, preds, _ = synthetic_pool(40)
    # tagged clips (the paper protocol drops untagged ones)
    full = manifest.assign(mp3name="x.mp3", mp3seconds=30.0, city="c", country="c",
                           continent="Europe", **{c: tags[c] for c in CATEGORY_COLUMNS})
    write_manifest(full, tmp_path / "manifest.csv")
    run_dir = tmp_path / "runs" / "synthetic"
    run_dir.mkdir(parents=True)
    write_predictions(run_dir / "predictions.jsonl", preds.values())
    return tmp_path / "manifest.csv", run_dir


def _logged(db):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("agl1k")
    (run,) = client.search_runs([exp.experiment_id])
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")}
    artifacts = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    return run.data.params, run.data.metrics, tags, artifacts, run.inputs.dataset_inputs[0].dataset.digest


def test_the_track_stage_logs_what_evaluate_run_logs(tmp_path, monkeypatch):
    from dataclasses import replace

    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run, track_evaluated

    manifest, run_dir = _run_folder(tmp_path)
    config = EvaluateConfig(protocols=["paper", "strict"], metric_bootstrap=20)
    info = {"backend": "knn", "model": "knn"}
    monkeypatch.delenv("AGL_MLFLOW_EXPERIMENT", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'inline.db'}")
        evaluate_run("synthetic", run_dir / "predictions.jsonl", manifest, run_dir, config, info=info)
        inline = _logged(tmp_path / "inline.db")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'tracked.db'}")
        doc = evaluate_run("synthetic", run_dir / "predictions.jsonl", manifest, run_dir,
                           replace(config, track=False), info=info)
        assert "mlflow_run_id" not in doc and not (tmp_path / "tracked.db").exists()  # the stage logs nothing
        track_evaluated(run_dir, manifest, config, info=info)
        tracked = _logged(tmp_path / "tracked.db")
    assert inline[0] == tracked[0]  # params
    assert inline[1] == tracked[1] and inline[1]["paper.n"] == 40  # metrics
    assert inline[2] == tracked[2]  # tags: run key, data version, model, git commit...
    assert inline[3] == tracked[3] and "metrics.json" in tracked[3]  # artifacts
    assert inline[4] == tracked[4]  # the dataset input


def test_a_run_scored_on_another_manifest_or_not_scored_is_one_line(tmp_path, monkeypatch):
    from dataclasses import replace

    from agl.contracts.models import parse_models
    from agl.counterfactual.listen import ListenConfig
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run, track_evaluated
    from agl.tracking.pipeline import TrackConfig, TrackInputs, track_pipeline

    manifest, run_dir = _run_folder(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    config = EvaluateConfig(protocols=["paper"], metric_bootstrap=20)
    specs = parse_models({"synthetic": {"backend": "knn", "model": "knn"}, "other": {"backend": "prior"}})
    track = TrackConfig(config, ListenConfig(level_bootstrap=20))
    with pytest.raises(AglError, match=r"runs/synthetic/metrics.json: not found; run `dvc repro evaluate@synthetic`"):
        track_pipeline(TrackInputs(manifest, run_dir.parent), specs, track)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluate_run("synthetic", run_dir / "predictions.jsonl", manifest, run_dir, replace(config, track=False))
    manifest.write_text(manifest.read_text().replace("k000", "k999"))  # the data moved on since
    with pytest.raises(AglError, match=r"metrics.json: scored on another manifest .*`dvc repro evaluate@synthetic`"):
        track_evaluated(run_dir, manifest, config)


def test_the_runs_table_orders_runs_as_the_leaderboard_ranks_them(tmp_path, monkeypatch):
    """Issue 50: MLflow's saved view sorted by mean distance, so a run that refused every clip
    (langprior on the demo: 10,000 km a refusal) stood second, where the leaderboard lists it
    unranked. The track stage logs the leaderboard's rank; the view sorts by it, an unranked
    run has none and comes last."""
    from dataclasses import replace

    import mlflow
    import pandas as pd

    from agl.contracts.models import parse_models
    from agl.core.headline import RANK_METRIC
    from agl.core.mlflow_view import VIEW_TAG
    from agl.counterfactual.listen import ListenConfig
    from agl.predictions.records import Prediction, Status, write_predictions
    from agl.scoring import leaderboard
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run
    from agl.tracking.pipeline import TrackConfig, TrackInputs, track_pipeline

    manifest, good = _run_folder(tmp_path)
    frame = pd.read_csv(manifest)
    far = [Prediction(k, Status.OK, latitude=-la, longitude=lo - 180 if lo > 0 else lo + 180)
           for k, la, lo in zip(frame["key"], frame["latitude"], frame["longitude"], strict=True)]
    refused = [Prediction(k, Status.REFUSED, refused=True) for k in frame["key"]]
    for name, preds in (("far", far), ("refuser", refused)):
        write_predictions(tmp_path / "runs" / name / "predictions.jsonl", preds)
    config = EvaluateConfig(protocols=["paper"], metric_bootstrap=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        docs = {name: evaluate_run(name, tmp_path / "runs" / name / "predictions.jsonl", manifest,
                                   tmp_path / "runs" / name, replace(config, track=False))
                for name in ("synthetic", "far", "refuser")}
    km = {n: d["protocols"]["paper"]["distance_error_km"] for n, d in docs.items()}
    assert km["synthetic"] < km["refuser"] == 10000.0 < km["far"]  # by distance the refuser is 2nd
    board = leaderboard.collect([tmp_path / "runs" / n / "metrics.json" for n in docs], "paper")
    board.to_csv(tmp_path / "leaderboard.csv", index=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("AGL_MLFLOW_EXPERIMENT", raising=False)
    specs = parse_models({n: {"backend": "knn", "model": "knn"} for n in docs})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        track_pipeline(TrackInputs(manifest, tmp_path / "runs", leaderboard=tmp_path / "leaderboard.csv"),
                       specs, TrackConfig(config, ListenConfig(level_bootstrap=20)))
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("agl1k")
    state = json.loads(json.loads(exp.tags[VIEW_TAG])["state"])
    assert state["orderByKey"] == f"metrics.`{RANK_METRIC}`" and state["orderByAsc"] is True
    assert state["selectedColumns"][0] == f"metrics.`{RANK_METRIC}`"
    runs = client.search_runs([exp.experiment_id], order_by=[state["orderByKey"] + " ASC"])
    assert [r.info.run_name for r in runs] == ["synthetic", "far", "refuser"]  # the leaderboard's order
    assert [r.data.metrics.get(RANK_METRIC) for r in runs] == [1.0, 2.0, None]  # unranked: no rank
