"""The README's first command: `dvc repro` on the embedded demo set, offline, in a temp copy
of the repo, with MLflow on a temp SQLite file (the session's one built demo, `built_demo`,
which the explorer's browser tests read too); a second `dvc repro` does nothing; the run
reproduces the committed dvc.lock bit for bit (`agl verify`: the stale-lock check), and an
ordinary rerun (`dvc repro -f` of the stages that resume or read caches) leaves dvc.lock as
it was: no output records run history."""

import json

import pytest
import yaml
from helpers import copy_built_demo, copy_repo, demo_env, run, sh

pytestmark = pytest.mark.slow


def test_a_fresh_clone_has_nothing_to_verify(tmp_path):
    """One line saying what to run."""
    work = copy_repo(tmp_path / "repo")
    env = demo_env(work, tmp_path / "mlflow.db")
    sh("git init -q && git add -A && git commit -qm init", work, env)
    fresh = run("agl verify", work, env, ok=False)
    assert fresh.returncode == 2 and fresh.stdout == "", fresh.stdout
    assert "nothing to verify yet: data/ is missing; run `agl download && dvc repro` first" in fresh.stderr


def test_dvc_repro_on_the_demo_set_end_to_end(built_demo):
    work, db, env, out = built_demo.work, built_demo.db, built_demo.env, built_demo.out
    # `agl download` cached data/ under its unchanged pin: DVC has nothing to re-save and no
    # reason to ask for `git add data.dvc`.
    assert "git add data.dvc" not in out and "'data.dvc' didn't change" in out, out

    # A stale lock cannot land: this fresh run must reproduce the committed dvc.lock (and
    # data.dvc) bit for bit; `agl verify` names each stage and output that differs.
    verify = run("agl verify", work, env, ok=None)
    assert verify.returncode == 0, (
        "a fresh `agl download && dvc repro` does not reproduce the committed dvc.lock; if the "
        "change is intended, refresh the lock (README: Bit for bit) and commit it:\n"
        + verify.stdout + verify.stderr)
    assert "SYNTHETIC" in out.upper() or "demo" in out.lower()

    models = list(yaml.safe_load((work / "params.yaml").read_text())["models"])
    assert "Running stage 'infer@knn'" in out and "Running stage 'evaluate@knn'" in out
    board = (work / "build" / "leaderboard.md").read_text()
    assert "## SYNTHETIC demo set (32 generated clips" in board  # the dataset's own table
    for name in models:
        assert f"| {name} |" in board, f"{name} missing from the leaderboard:\n{board}"
        assert (work / "build" / "runs" / name / "metrics.json").exists()

    # Each clip gets its own draw (a shared cache entry would repeat one guess).
    from agl.predictions.records import read_predictions

    random_run = read_predictions(work / "build" / "runs" / "random" / "predictions.jsonl")
    assert len({(p.latitude, p.longitude) for p in random_run.values()}) == len(random_run) == 32

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    runs = mlflow.search_runs(experiment_names=["agl1k"], output_format="list")
    by_name = {r.data.tags["mlflow.runName"]: r for r in runs}
    assert set(by_name) >= set(models)
    for name in models:
        r = by_name[name]
        assert len(r.data.tags["data_version"]) == 64 and r.data.tags["git_commit"]
        assert r.data.tags["dataset"].startswith("SYNTHETIC demo set")
        summary = json.loads((work / "build" / "runs" / name / "run_summary.json").read_text())
        assert r.data.tags["prompt_hash"] == summary["prompt_sha256"]
        assert r.data.metrics["run.n"] == 32 and "run.latency_s.p95" in r.data.metrics
        assert r.data.metrics["paper.n"] == 32 and "strict.ci95_hi.distance_error_km" in r.data.metrics
        artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(r.info.run_id)}
        assert {"predictions.jsonl", "scores_paper.csv", "metrics.json"} <= artifacts
    # The track stage logged them in one process, after the stages that scored them, each
    # listen level nested under its model's run; its receipt names them by key, not run id.
    assert out.count("Running stage 'track'") == 1, out
    assert f"track: {len(models)} run(s) and 4 listen level(s) logged to MLflow" in out, out
    levels = [r for r in runs if r.data.tags.get("intervention")]
    assert len(levels) == 4 and {r.data.tags["mlflow.parentRunId"] for r in levels} == {by_name["knn"].info.run_id}
    receipt = json.loads((work / "build" / "mlflow_runs.json").read_text())
    assert receipt["runs"]["knn"] == by_name["knn"].data.tags["agl.run_key"]
    assert sorted(receipt["listen"]["knn-truncate"] + receipt["listen"]["knn-mask_speech"]
                  + receipt["listen"]["knn-tags"]) == sorted(r.data.tags["agl.run_key"] for r in levels)
    assert "localizability" in by_name and "holdout_spearman_rho" in by_name["localizability"].data.metrics

    report = (work / "build" / "report" / "report.html").read_text()
    assert "SYNTHETIC demo set" in report  # labelled wherever it appears
    # 4 to 7 clips per continent and a handful of correct countries: nothing over-claimed.
    assert "insufficient data (n = " in report and "No factor estimated: insufficient data" in report
    assert "Accuracy by true continent: insufficient data" in report
    # The counterfactual subset's 16 clips: the effect on all of them is estimated; its
    # speech (7) and non-speech (9) clips are below the minimum support of 10.
    effects = json.loads((work / "build" / "counterfactual" / "summary.json").read_text())
    assert effects["knn/mask_speech/default/all"]["n"] == 16 and "delta_km" in effects["knn/mask_speech/default/all"]
    assert effects["knn/mask_speech/default/speech"] == {"n": 7, "insufficient": "insufficient data (n = 7, needs 10)"}
    # The tags intervention: the 16 subset clips as published (3 with planted tags), paired
    # with the original run (knn's effect there is its own: its neighbours are the subset's).
    tags = effects["knn/tags/default/all"]
    assert tags["n"] == 16 and "delta_km" in tags, tags
    lock = json.loads((work / "build" / "perturb" / "tags" / "default" / "lock.json").read_text())
    assert lock["source"]["intervention"]["kind"] == "tags"
    assert "What the files carry" in report and "3 of 32 clips carry their place in their tags" in report

    # MLflow's UI opens the experiment on its runs, not on the GenAI view.
    assert mlflow.MlflowClient().get_experiment_by_name("agl1k").tags["mlflow.experimentKind"] == (
        "custom_model_development")

    # The stages cached their bytecode beside the sources they declare (Python's default):
    # .dvcignore keeps it out of their hashes, so the lock above matched and nothing reads as changed.
    assert list((work / "src" / "agl").rglob("__pycache__/*.pyc")), "no stage wrote its bytecode"

    # Nothing changed: nothing runs again.
    status = run("dvc status", work, env, ok=None)
    assert status.returncode == 0 and "changed" not in status.stdout, status.stdout


def test_reruns_leave_the_lock_and_tampering_is_named(built_demo, tmp_path):
    """On a copy of the built demo (the explorer's tests read the original)."""
    demo = copy_built_demo(built_demo, tmp_path)
    work, env = demo.work, demo.env
    models = list(yaml.safe_load((work / "params.yaml").read_text())["models"])
    # An ordinary rerun of every stage whose output could carry run history (resumed runs,
    # replies from the cache, listen's estimate) and of what reads them: dvc.lock unchanged.
    # (`dvc repro -f` of the whole pipeline also leaves it unchanged; these are the stages
    # that once did not, kept to the fast ones.)
    # langprior is left out: it re-listens to every clip with Whisper (a minute of CPU), and what
    # it measures per clip is kept out of its records by test_verify_history's
    # test_no_wall_time_a_backend_measures_reaches_a_tracked_record.
    infer = " ".join(f"infer@{m}" for m in models if m != "langprior")
    sh(f"dvc repro -f -s {infer} listen@knn-mask_speech listen@knn-truncate counterfactual", work, env)
    diff = run("git diff --stat --exit-code dvc.lock", work, env, ok=None)
    assert diff.returncode == 0, "a rerun rewrote dvc.lock: an output records run history\n" + diff.stdout

    # One thread for OpenMP and BLAS: the stages whose numbers come from threaded numeric
    # code (the tagger's signal measures, BirdNET, the localizability fit) give the same
    # bytes, so the committed lock holds on a machine with any core count. (A full `dvc repro
    # -f` under one thread also matches; it is left out to keep the suite short. The filter's
    # measures and knn's features under one thread: test_determinism; Whisper and silero-vad:
    # test_kernels_isa, on four of the speech clips.)
    one = {**env, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    sh("dvc repro -f -s tag birds localize", work, one)
    single = run("agl verify", work, one, ok=None)
    assert single.returncode == 0, single.stdout + single.stderr

    # Re-runs follow exactly what changed. An edit to a module no stage loads (`agl verify`'s
    # own wing) changes no stage; an edit to a backend changes exactly the stages that declare
    # the backends (what tests/test_stage_deps.py proves they load, registry included).
    verify_py = work / "src" / "agl" / "verify" / "compare.py"
    verify_py.write_text(verify_py.read_text() + "\n# an edit no stage loads\n")
    assert json.loads(run("dvc status --json", work, env).stdout) == {}
    knn_py = work / "src" / "agl" / "backends" / "knn.py"
    knn_py.write_text(knn_py.read_text() + "\n# an edit every backend lookup loads\n")
    lock = yaml.safe_load((work / "dvc.lock").read_text())["stages"]
    loads_backends = {name for name, st in lock.items()
                      if any(d["path"] == "src/agl/backends" for d in st.get("deps", []))}
    changed = json.loads(run("dvc status --json", work, env).stdout)
    assert set(changed) == loads_backends and {"infer@knn", "localize"} <= loads_backends, changed
    sh("git checkout -- src/agl", work, env)

    # An output edited after the run is named, with the stage that wrote it.
    (work / "build" / "leaderboard.md").write_text("tampered\n")
    tampered = run("agl verify", work, env, ok=None)
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    assert "stage leaderboard" in tampered.stdout and "build/leaderboard.md" in tampered.stdout
