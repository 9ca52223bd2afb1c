"""The infer stage under real DVC: one stage per model; an unchanged rerun makes no request."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fake_llm import Answer, FakeServer, openai_completion
from helpers import copy_sources, sh, subprocess_env
from test_inference_api import GOOD, make_clips

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_dvc_repro_runs_each_model_and_an_unchanged_rerun_makes_no_request(tmp_path):
    work = tmp_path / "proj"
    work.mkdir()
    copy_sources(work, "infer.py", "_params.py")
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["infer"]
    # The infer stage alone: the curation tables it declares for a cascade entry are outputs
    # of stages this project leaves out (no entry here is a cascade).
    stage["do"]["deps"] = [d for d in stage["do"]["deps"] if not str(d).startswith("build/curation/")]
    (work / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"infer": stage}}))
    manifest, audio = make_clips(work / "data", 4)
    assert manifest == work / "data" / "manifest.csv" and audio == work / "data" / "audio"

    env = subprocess_env(work, keys=False)
    with FakeServer(lambda call: Answer(200, openai_completion(GOOD))) as server:
        params = {
            "infer": {"prompt": "default", "concurrency": 2, "timeout_s": 30, "max_retries": 1,
                      "cache_dir": "cache/responses"},
            # infer@<model> declares where a `paper:` prompt source resolves (dvc.yaml)
            "paper": {"base_url": str(work / "mirror"), "published": {}},
            "models": {
                "random": {"backend": "random", "model": "uniform", "settings": {"seed": 0}},
                "served": {"backend": "openai-compatible", "model": "Qwen/Qwen2-Audio",
                           "settings": {"base_url": server.url + "/v1", "temperature": 0},
                           "price_in_per_m": 1.0, "price_out_per_m": 2.0},
            },
        }
        (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        sh("git init -q", work, env)
        sh("dvc init -q", work, env)
        out = sh("dvc repro", work, env)
        assert "--name random " in out and "--name served " in out  # stages infer@random, infer@served
        assert len(server.calls) == 4
        for name in ("random", "served"):
            lines = (work / "build" / "runs" / name / "predictions.jsonl").read_text()
            assert len(lines.splitlines()) == 4
            assert (work / "build" / "runs" / name / "run_summary.json").exists()

        out = sh("dvc repro", work, env)
        assert "didn't change" in out and len(server.calls) == 4

        # Adding a model reruns the stages that read `models`; finished clips are skipped.
        params["models"]["prior"] = {"backend": "prior", "model": "c"}
        (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        sh("dvc repro", work, env)
        assert len(server.calls) == 4
        assert len((work / "build/runs/prior/predictions.jsonl").read_text().splitlines()) == 4
