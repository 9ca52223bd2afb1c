"""Beyond one machine, end to end: the pipeline against a real MLflow server on PostgreSQL
(scripts/mlflow-server), a DVC remote round trip to a fresh clone, experiments with their
headline metrics in `dvc exp show`, and a queued sweep of the localize stage.

One repository, a copy of the session's built demo (conftest.built_demo: the whole default
pipeline, its DVC cache included), serves four tests: its MLflow-logging stages run again
against the server, so the runs land there without building the demo a second time. A fifth
kills the MLflow server's leader with SIGKILL and checks `status` and `stop` see (and end)
the orphans.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from helpers import NO_NETWORK, agl, copy_built_demo, free_port, require_postgresql, sh, subprocess_env

REPO = Path(__file__).resolve().parents[1]
TARGETS = "leaderboard localize birds counterfactual track"
# One worker runs them all: the session's `team` (PostgreSQL, MLflow, a pipeline run) is built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("team")]


# Module scope: the MLflow server, its job consumers and PostgreSQL stop once this file's tests
# are done, instead of idling beside the rest of the suite until the session ends.
@pytest.fixture(scope="module")
def team(built_demo, tmp_path_factory):
    require_postgresql()
    # As root the cluster runs as `postgres`, which must be able to enter the folder: a
    # world-traversable temp dir (pytest's own are 0700).
    server_dir = Path(tempfile.mkdtemp(prefix="agl-mlflow-"))
    server_dir.chmod(0o755)
    ports = {"MLFLOW_PORT": str(free_port()), "PG_PORT": str(free_port())}
    root = tmp_path_factory.mktemp("team")
    url = f"http://127.0.0.1:{ports['MLFLOW_PORT']}"
    # The server starts while the built demo is copied (waiting for its build, if need be).
    env = subprocess_env(root / "repo", keys=False, **ports, MLFLOW_TRACKING_URI=url, **NO_NETWORK,
                         NO_PROXY="127.0.0.1,localhost")
    server = subprocess.Popen(
        [str(REPO / "scripts" / "mlflow-server"), "start", str(server_dir / "srv")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        work = copy_built_demo(built_demo, root).work
        (work / "metrics" / "sensitivity.csv").write_text("")  # no sweep yet
        out, _ = server.communicate(timeout=300)
        assert server.returncode == 0, out
        assert f"MLFLOW_TRACKING_URI={url}" in out
        # The stages that log to MLflow (localize its selection, track every run and listen
        # level) run again against the server; every other output is current. Same bytes:
        # dvc.lock does not change.
        sh("dvc repro -f -s localize track", work, env)
        assert sh("git status --porcelain dvc.lock", work, env) == ""
        sh("git add -A && git commit -qm 'demo run'", work, env)
        yield {"work": work, "env": env, "url": url, "root": root, "artifacts": server_dir / "srv" / "artifacts"}
    finally:
        subprocess.run(
            [str(REPO / "scripts" / "mlflow-server"), "stop", str(server_dir / "srv")],
            env=env,
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(server_dir, ignore_errors=True)


def test_runs_land_in_mlflow_on_postgres(team):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=team["url"])
    assert client._tracking_client.store.__class__.__name__ == "RestStore"
    exp = client.get_experiment_by_name("agl1k")
    runs = {r.data.tags["mlflow.runName"]: r for r in client.search_runs([exp.experiment_id])}
    assert {"knn", "prior", "localizability"} <= set(runs)
    knn = runs["knn"]
    boot = yaml.safe_load((team["work"] / "params.yaml").read_text())["evaluate"]["metric_bootstrap"]
    assert knn.data.params["bootstrap"] == str(boot) and knn.data.params["backend"] == "knn"
    assert knn.data.metrics["paper.n"] == 32 and "paper.distance_error_km" in knn.data.metrics
    (ds,) = knn.inputs.dataset_inputs
    assert ds.dataset.name.startswith("SYNTHETIC demo set")
    assert len(ds.dataset.digest) >= 16 and knn.data.tags["data_version"].startswith(ds.dataset.digest)
    names = {a.path for a in client.list_artifacts(knn.info.run_id)}
    assert {"predictions.jsonl", "metrics.json", "scores_paper.csv"} <= names
    # Artifacts are proxied: the server stored them, the client downloads them back.
    local = client.download_artifacts(knn.info.run_id, "metrics.json", str(team["root"]))
    assert json.loads(Path(local).read_text())["run"] == "knn"
    assert any(team["artifacts"].rglob("metrics.json"))
    # The runs view (agl.core.mlflow_view) is saved on the server; `agl mlflow` links to it there.
    from agl.core.mlflow_view import VIEW_TAG, runs_url

    state = json.loads(json.loads(exp.tags[VIEW_TAG])["state"])
    # the leaderboard's rank first, sorted by it (issue 50), then the headline
    assert state["selectedColumns"][:2] == ["metrics.`leaderboard_rank`", "metrics.`paper.distance_error_km`"]
    assert state["orderByKey"] == "metrics.`leaderboard_rank`"
    done = agl("mlflow", cwd=team["work"], env=team["env"], ok=True)
    assert done.stdout.splitlines() == [runs_url(exp.experiment_id, team["url"])]


def test_dvc_remote_round_trip_to_a_fresh_clone(team):
    work, env, root = team["work"], team["env"], team["root"]
    remote = root / "remote"
    # agl download stored data/ in DVC's cache under its pin; dvc repro cached every output.
    sh(f"dvc remote add -d store {remote} && git add .dvc/config && git commit -qm 'DVC remote'", work, env)
    sh("dvc push", work, env)
    clone = root / "clone"
    sh(f"git clone -q {work} {clone}", root, env)
    assert not (clone / "build").exists() and not (clone / "data").exists()
    env2 = {**env, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}  # any logging would fail
    sh(f"dvc pull --with-deps {TARGETS}", clone, env2)  # the stages these tests read
    out = sh(f"dvc repro {TARGETS}", clone, env2)
    # Every output came back from the remote (or is a metrics file in git): 0 stages re-run,
    # BirdNET's and the counterfactual chain's included.
    assert "Running stage" not in out, out
    for f in ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "curation/birds_summary.json",
              "counterfactual/summary.json", "listen/knn/truncate.json", "perturb/truncate.json"):
        assert (clone / "build" / f).read_bytes() == (work / "build" / f).read_bytes(), f
    for f in ("runs/knn.json", "curation/birds.json", "counterfactual.json"):
        assert (clone / "metrics" / f).read_text() == (work / "metrics" / f).read_text(), f
    # Every declared metric is in git (metrics/) or DVC's cache: none is missing (`!`).
    show = sh("dvc exp show --no-pager --md --no-fetch", clone, {**env2, "COLUMNS": "1000"})
    assert "!" not in show.replace("<!--", ""), show


def _exp_rows(work: Path, env: dict) -> dict[str, dict]:
    """`dvc exp show --json`: experiment name -> {metrics: {file: values}, params}."""
    doc = json.loads(sh("dvc exp show --json --no-fetch", work, env))
    rows = {}

    def visit(entry):
        for rev in entry.get("revs", []) if "revs" in entry else [entry]:
            data = rev.get("data") or {}
            name = rev.get("name") or rev.get("rev")
            rows[name] = {
                "metrics": {f: (v.get("data") or {}) for f, v in (data.get("metrics") or {}).items()},
                "params": {f: (v.get("data") or {}) for f, v in (data.get("params") or {}).items()},
            }
        for child in entry.get("experiments") or []:
            visit(child)

    for baseline in doc:
        visit(baseline)
    return rows


def test_experiment_shows_headline_metrics(team):
    work, env = team["work"], team["env"]
    sh("dvc exp run -q -n boot500 -S evaluate.metric_bootstrap=500 evaluate@knn", work, env)
    rows = _exp_rows(work, env)
    # Back to the baseline (the sweep below queues from it) and out of the sweep's table.
    sh("dvc exp remove boot500 && git checkout -- params.yaml metrics dvc.lock", work, env)
    knn = rows["boot500"]["metrics"]["metrics/runs/knn.json"]["knn"]
    for key in ("mean_km", "median_km", "city_acc", "country_acc", "continent_acc"):
        assert isinstance(knn[key], int | float), (key, knn)
    assert rows["boot500"]["params"]["params.yaml"]["evaluate"]["metric_bootstrap"] == 500
    # The baseline row carries numbers too (its commit holds the metrics files).
    base = next(
        v for k, v in rows.items() if k not in ("boot500", "workspace") and "metrics/runs/knn.json" in v["metrics"]
    )
    assert base["metrics"]["metrics/runs/knn.json"]["knn"]["mean_km"] == knn["mean_km"]


def test_queued_sweep_of_the_localize_stage(team):
    work, env = team["work"], team["env"]
    gammas = [5000.0, 6500.0, 8000.0, 10000.0]  # a 4-point sweep of one param (fewer: the
    # selection can come out equal everywhere, and `--only-changed` then drops its column)
    out = sh(f"scripts/sensitivity-sweep --gamma {' '.join(f'{g:g}' for g in gammas)} --theta 0 --jobs 2",
             work, env)
    assert "wrote metrics/sensitivity.csv" in out
    import pandas as pd

    table = pd.read_csv(work / "metrics" / "sensitivity.csv")
    assert len(table) == len(gammas) and list(table["gamma_km"]) == gammas
    assert table["status"].str.match(r"^(ok|failed: .+)$").all()
    ok = table[table["status"] == "ok"]
    assert len(ok) == len(gammas) and ok["jaccard"].between(0, 1).all(), table
    rows = _exp_rows(work, env)
    for name in ok["experiment"]:
        loc = rows[name]["metrics"]["metrics/curation/localizability.json"]["localize"]
        assert isinstance(loc["selected"], int) and "holdout_rho" in loc
    # Queued experiments shared the workspace's MLflow (the server), not a lost copy.
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=team["url"])
    exp = client.get_experiment_by_name("agl1k")
    logged = {
        float(r.data.params["gamma_km"])
        for r in client.search_runs([exp.experiment_id], filter_string="tags.`agl.stage` = 'localize'")
    }
    assert set(gammas) <= logged, logged  # one run per parameter set

    # The docs' claim (docs/experiments.md): the real command's table, as a terminal 200
    # columns wide shows it, is readable: nothing squeezed (its natural width is at most 200),
    # every experiment's headline numbers visible, no `!` (a metric missing at a commit).
    wide = sh("dvc exp show --only-changed --no-pager", work, {**env, "COLUMNS": "1000"})
    lines = [line.rstrip() for line in wide.splitlines() if line.strip()]
    width = max(map(len, lines))
    assert width <= 200, f"{width} columns:\n{wide}"
    shown = sh("dvc exp show --only-changed --no-pager", work, {**env, "COLUMNS": "200"})
    assert "…" not in shown and "!" not in shown, shown
    header = next(line for line in lines if "Experiment" in line)
    for col in ("localize.selected", "localize.holdout_rho", "localizability.gamma_km"):
        assert col in header, header
    for name in ok["experiment"]:
        row = next(line for line in lines if f"[{name}]" in line)
        cells = row.split()
        numbers = [c for c in cells if _is_number(c)]
        assert len(numbers) >= 3, row  # γ and the selection's numbers, in this experiment's row
    print(f"dvc exp show --only-changed after the sweep: {width} columns\n{shown}")

    # `agl exp` (agl.report.experiments): the same experiments in 120 columns, a row each.
    compact = sh("agl exp", work, env)
    lines = compact.rstrip("\n").splitlines()
    assert max(map(len, lines)) <= 120, compact
    assert lines[0].split()[:2] == ["experiment", "gamma_km"], compact
    for name, gamma in zip(ok["experiment"], ok["gamma_km"], strict=True):
        row = next(line for line in lines if line.startswith(name + " "))
        assert float(row.split()[1].replace(",", "")) == gamma, row  # its γ, in the γ column
    body = [line for line in lines[2:] if not line.startswith("(")]
    assert "…" not in "".join(body), compact
    print(f"agl exp after the sweep:\n{compact}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(stat.parent.name))
    return found


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_kill_9_of_the_leader_then_status_and_stop_tell_the_truth():
    """`kill -9` of the PID in mlflow.pid leaves its children serving: status must say so,
    and stop must end the whole process group."""
    require_postgresql()
    server_dir = Path(tempfile.mkdtemp(prefix="agl-mlflow-"))
    server_dir.chmod(0o755)  # as root the cluster runs as `postgres` (see `team`)
    srv = server_dir / "srv"
    port = free_port()
    env = subprocess_env(MLFLOW_PORT=str(port), PG_PORT=str(free_port()))

    def script(cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(REPO / "scripts" / "mlflow-server"), cmd, str(srv)], env=env,
                              capture_output=True, text=True, timeout=300)

    try:
        started = script("start")
        assert started.returncode == 0, started.stdout + started.stderr
        status = script("status")
        assert status.returncode == 0 and "mlflow: running" in status.stdout, status.stdout
        leader = int((srv / "mlflow.pid").read_text())
        assert len(_group_alive(leader)) >= 2  # mlflow's CLI, uvicorn (and its worker)

        os.kill(leader, signal.SIGKILL)
        for _ in range(40):
            if leader not in _group_alive(leader):
                break
            time.sleep(0.25)
        orphans = _group_alive(leader)
        assert orphans and leader not in orphans and _port_open(port)  # still serving
        status = script("status")
        assert status.returncode == 1, status.stdout
        line = status.stdout.splitlines()[0]
        # The group's children come and go (MLflow's job runner ends idle workers), so the
        # line is checked against the group as it is now, not the count taken before.
        named = re.search(r"but (\d+) process(?:es)? still run \(pids ([\d ]+)\)", line)
        assert line.startswith("mlflow: orphaned") and named, line
        pids = [int(x) for x in named.group(2).split()]
        assert int(named.group(1)) == len(pids) >= 1 and leader not in pids, line
        assert set(pids) <= set(orphans) | set(_group_alive(leader)), (line, orphans)
        assert f"serving 127.0.0.1:{port}" in line and "stop" in line
        again = script("start")  # refuses to start beside its own orphans
        assert again.returncode == 1 and "already running" in again.stderr

        stopped = script("stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert _group_alive(leader) == [] and not _port_open(port)
        status = script("status")
        assert status.returncode == 3, status.stdout
        assert status.stdout.splitlines() == ["mlflow: stopped", "postgresql: stopped"]
    finally:
        script("stop")
        shutil.rmtree(server_dir, ignore_errors=True)
