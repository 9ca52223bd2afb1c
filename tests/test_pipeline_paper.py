"""End to end: `dvc repro` of the paper-reproduction stages in a temp copy of the repo,
fetching the authors' files over HTTP from a local mirror, MLflow on a temp SQLite file."""

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest
import yaml
from helpers import copy_repo, sh, subprocess_env

REPO = Path(__file__).resolve().parents[1]
QWEN_PATH = "results/audio_localization/qwen25-omni/seed_42_progress_fixed.json"


@pytest.fixture
def mirror(tmp_path, agl1k_manifest, qwen_published, shared):
    """The authors' repository layout, served on 127.0.0.1."""
    root = tmp_path / "mirror"
    (root / "data").mkdir(parents=True)
    shutil.copy(agl1k_manifest, root / "data" / "geoLocalization_schema.csv")
    (root / QWEN_PATH).parent.mkdir(parents=True)
    shutil.copy(qwen_published, root / QWEN_PATH)
    # No README.md: the leaderboard falls back to the paper values shipped with agl.
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_dvc_repro_paper_stages(tmp_path, mirror):
    work = copy_repo(tmp_path / "repo")
    params = yaml.safe_load((work / "params.yaml").read_text())
    # Named by its pinned short name: the mirror's copy must match params.yaml's SHA-256.
    params["paper"].update(base_url=mirror, runs=[{"published": "qwen25-omni", "model": "Qwen2.5-Omni"}])
    assert params["paper"]["published"]["qwen25-omni"]["path"] == QWEN_PATH
    params["evaluate"]["metric_bootstrap"] = 200
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    db = tmp_path / "mlflow.db"
    env = subprocess_env(work, MLFLOW_TRACKING_URI=f"sqlite:///{db}")
    sh("git init -q && (test -d .dvc || dvc init -q) && git add -A && git commit -qm init", work, env)
    out = sh("dvc repro paper", work, env)
    assert ("paper/qwen25-omni: mean 5476.83 km, continent 0.45, country 0.26, city 0.02; "
            "refused 322, no coordinates 385, rejected 448") in out
    (work / "build" / "runs").mkdir(parents=True, exist_ok=True)
    board = sh("dvc repro -s leaderboard", work, env)
    row = next(line for line in board.splitlines() if "paper/qwen25-omni" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4].startswith("5476.83 [") and cells[5] == "5476.83"  # ours [CI] | paper's
    assert "paper values from agl's shipped copy (src/agl/data/paper_values.csv)" in board
    assert (work / "build" / "leaderboard.html").exists() and (work / "build" / "leaderboard.csv").exists()

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    runs = mlflow.search_runs(experiment_names=["agl1k"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert round(run.data.metrics["paper.distance_error_km"], 2) == 5476.83
    assert round(run.data.metrics["paper.speech.distance_error_km"], 2) == 4540.06
    assert len(run.data.tags["data_version"]) == 64 and run.data.tags["git_commit"] != "unknown"
    assert run.data.params["backend"] == "replay"
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"metrics.json", "scores_paper.csv", "predictions.jsonl"} <= names

    # Re-evaluating the same inputs updates the run instead of adding one.
    sh("dvc repro -f paper", work, env)
    assert len(mlflow.search_runs(experiment_names=["agl1k"], output_format="list")) == 1
    # An unchanged pipeline is up to date.
    assert "didn't change" in sh("dvc repro paper", work, env) or "up to date" in sh("dvc status paper", work, env)
