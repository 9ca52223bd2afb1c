"""Every evaluated run carries its data in MLflow: a `mlflow.data` dataset input (name, digest =
the manifest's content hash, source) beside the `data_version` tag, logged once per run."""

from __future__ import annotations

import warnings

import mlflow


def test_evaluated_run_logs_its_dataset_once(tmp_path, monkeypatch, qwen_published, agl1k_manifest):
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("AGL_CACHE_DIR", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):  # re-evaluating updates the run: still one dataset input
            doc = evaluate_run(
                run="qwen",
                predictions_path=qwen_published,
                manifest_path=agl1k_manifest,
                out_dir=tmp_path / "out",
                config=EvaluateConfig(protocols=["paper"], metric_bootstrap=10),
            )
    assert (doc["dataset_clips"], doc["clips_predicted"]) == (1444, 1442)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = mlflow.get_run(doc["mlflow_run_id"])
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.name == doc["dataset"] == "1444 clips"
    assert doc["data_version"].startswith(inp.dataset.digest) and len(inp.dataset.digest) == 36
    assert agl1k_manifest.name in inp.dataset.source
    assert run.data.tags["data_version"] == doc["data_version"]
    found = mlflow.search_runs(
        experiment_names=["agl1k"], output_format="list", filter_string=f"dataset.digest = '{inp.dataset.digest}'"
    )
    assert [r.info.run_id for r in found] == [run.info.run_id]
