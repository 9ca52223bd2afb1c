"""Every path to a number is honest (issue 23): an input that cannot give a true score is a
one-line error, and one that gives a score of part of the data says how much (n of N)."""

from __future__ import annotations

import json

import pytest
from factories import manifest, prediction

from agl.cli import main
from agl.dataset.manifest import write_manifest
from agl.predictions.records import PredictionWriter, Status
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import evaluate_run


def one_line_error(capfd, argv) -> str:
    rc = main(argv)
    captured = capfd.readouterr()
    assert rc == 2, captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.out == ""  # no number was printed
    return lines[0]


@pytest.fixture
def small(tmp_path):
    """A 10-clip manifest and a complete predictions file for it."""
    m = tmp_path / "manifest.csv"
    write_manifest(manifest([{"key": f"k{i}", "mp3name": f"c{i}.mp3"} for i in range(10)]), m)
    preds = tmp_path / "run" / "predictions.jsonl"
    with PredictionWriter(preds) as w:
        for i in range(10):
            w.write(prediction(f"k{i}", 48.0 + i, 2.0, "Paris", "France", "Europe"))
    return m, preds


def published_rows(n: int, *, raw: bool) -> list[dict]:
    """Rows in the authors' shape for the clips k0..k{n-1} of `small`."""
    reply = ('{"city": "Paris", "country": "France", "continent": "Europe", '
             '"latitude": 48.85, "longitude": 2.35}')
    return [{"question_id": f"k{i}", "predicted_city": "Paris", "predicted_country": "France",
             "predicted_continent": "Europe", "predicted_latitude": 48.85,
             "predicted_longitude": 2.35, "reasoning": "", "model_output": reply if raw else ""}
            for i in range(n)]


# --- a re-parse with no raw text -------------------------------------------------------------

def test_evaluate_reparse_of_a_file_without_raw_replies_is_refused(capfd, qwen_published, agl1k_manifest):
    # On main: 10000.00 km, every accuracy 0, exit 0, no warning.
    line = one_line_error(capfd, ["evaluate", str(qwen_published), "--manifest", str(agl1k_manifest),
                                  "--reparse", "--bootstrap", "10"])
    assert "none of its 1442 rows" in line and "model_output" in line
    assert "without --reparse" in line


def test_import_reparse_of_a_file_without_raw_replies_is_refused(tmp_path, capfd):
    src = tmp_path / "seed_42_progress_fixed.json"
    src.write_text(json.dumps(published_rows(4, raw=False)))
    out = tmp_path / "out.jsonl"
    line = one_line_error(capfd, ["import", str(src), "--out", str(out), "--reparse"])
    assert "none of its 4 rows" in line and "without --reparse" in line
    assert not out.exists()


def test_evaluate_reparse_with_some_rows_without_raw_text_warns_with_the_count(tmp_path, small, capfd):
    m, _ = small
    rows = published_rows(10, raw=True)
    rows[3]["model_output"] = rows[7]["model_output"] = ""
    src = tmp_path / "seed_42_ABCD.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["evaluate", str(src), "--manifest", str(m), "--reparse", "--bootstrap", "10"]) == 0
    err = capfd.readouterr().err
    assert f"warning: {src}: 2 of 10 row(s) have no raw model_output to reparse" in err
    assert "scored as unparseable" in err


# --- torn, truncated, partially matching predictions -------------------------------------------

def test_a_predictions_file_cut_mid_line_is_refused(small, capfd):
    m, preds = small
    data = preds.read_bytes()
    cut = data[: data.index(b"\n", len(data) // 2) + 20]  # ends inside a record
    preds.write_bytes(cut)
    line = one_line_error(capfd, ["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"])
    assert str(preds) in line and "cut off" in line and "line 7" in line


def test_a_run_file_shorter_than_its_run_summary_is_refused(small, capfd):
    m, preds = small
    (preds.parent / "run_summary.json").write_text(json.dumps({"n": 10, "n_recorded": 10}))
    lines = preds.read_text().splitlines(keepends=True)
    preds.write_text("".join(lines[:6]))  # cut at a line boundary: nothing looks torn
    line = one_line_error(capfd, ["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"])
    assert "6 clip(s)" in line and "run_summary.json" in line and "10" in line


def test_a_partial_predictions_file_is_scored_with_its_coverage_and_a_warning(small, capfd):
    m, preds = small
    lines = preds.read_text().splitlines(keepends=True)
    preds.write_text("".join(lines[:6]))
    assert main(["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"]) == 0
    cap = capfd.readouterr()
    assert "predictions for 6 of 10 clips" in cap.err and "warning" in cap.err
    assert "6 of 10 clips of the manifest" in cap.out
    assert main(["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10", "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert (doc["clips_predicted"], doc["dataset_clips"]) == (6, 10)


def test_a_full_file_prints_its_coverage_without_a_warning(small, capfd):
    m, preds = small
    assert main(["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"]) == 0
    cap = capfd.readouterr()
    assert "10 of 10 clips of the manifest" in cap.out and "warning" not in cap.err


def test_the_evaluate_stage_line_carries_the_coverage(tmp_path, small):
    from agl.scoring.text import run_lines

    m, preds = small
    lines = preds.read_text().splitlines(keepends=True)
    preds.write_text("".join(lines[:6]))
    with pytest.warns(UserWarning, match="predictions for 6 of 10 clips"):
        doc = evaluate_run(run="r", predictions_path=preds, manifest_path=m,
                           out_dir=tmp_path / "o",
                           config=EvaluateConfig(protocols=["paper", "strict"], metric_bootstrap=10, track=False))
    assert (doc["clips_predicted"], doc["dataset_clips"]) == (6, 10)
    out = run_lines(doc)
    assert len(out) == 2 and all("6/10 clips predicted" in line for line in out)
    assert out[0].startswith("r [paper]: n=6 ") and out[1].startswith("r [strict]: n=10 ")


def test_evaluate_run_refuses_a_torn_file(tmp_path, small):
    from agl.errors import AglError

    m, preds = small
    preds.write_bytes(preds.read_bytes()[:-15])
    with pytest.raises(AglError, match="cut off"):
        evaluate_run(run="r", predictions_path=preds, manifest_path=m, out_dir=tmp_path / "o",
                     config=EvaluateConfig(protocols=["paper"], metric_bootstrap=10, track=False))


def test_failed_clips_are_counted_where_a_score_is_printed(tmp_path, small, capfd):
    m, preds = small
    with PredictionWriter(preds) as w:
        w.write(prediction("k2", status=Status.FAILED, error="HTTP 503"))
    assert main(["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"]) == 0
    err = capfd.readouterr().err
    assert "1 of 10 clip(s) have no answer (status failed" in err


# --- the infer stage --------------------------------------------------------------------------

def test_the_infer_stage_fails_when_no_clip_succeeds(tmp_path):
    """On main the stage exited 0 and DVC locked a run of failures, which evaluate then
    scored (10,000 km a clip under the paper protocol)."""
    import subprocess
    import sys

    import yaml
    from helpers import REPO, subprocess_env
    from test_inference_api import make_clips

    m, audio = make_clips(tmp_path / "data", 2)
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["infer"].update(cache_dir=None, max_retries=0)
    doc["models"] = {"dead": {"backend": "openai", "model": "m", "settings": {
        "base_url": "http://127.0.0.1:9/v1", "temperature": 0}}}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(doc))
    out = tmp_path / "runs" / "dead"
    r = subprocess.run([sys.executable, str(REPO / "stages" / "infer.py"), "--name", "dead",
                        "--manifest", str(m), "--audio-root", str(audio), "--out", str(out),
                        "--params", str(params)], capture_output=True, text=True, cwd=tmp_path,
                       env=subprocess_env(OPENAI_API_KEY="sk-test-0123456789abcdef0123"))
    assert r.returncode != 0, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "error:" in last and "no clip succeeded" in last and "dvc repro infer@dead" in last
    assert "rerun the same command" not in r.stderr  # `dvc repro` is what reruns a stage


# --- the leaderboard --------------------------------------------------------------------------

def test_a_run_without_the_leaderboards_protocol_is_counted_not_silently_dropped(tmp_path):
    from agl.errors import AglError
    from agl.scoring import leaderboard

    def metrics(run, protocols):
        path = tmp_path / run / "metrics.json"
        path.parent.mkdir(parents=True)
        res = {"n": 10, "distance_error_km": 5000.0, "ci95": {}}
        path.write_text(json.dumps({"run": run, "protocols": {p: res for p in protocols}}))
        return path

    both, paper_only = metrics("knn", ["paper", "strict"]), metrics("paper-qwen", ["paper"])
    with pytest.warns(UserWarning, match=r"1 run\(s\) left out of the 'strict' leaderboard.*"
                                         r"paper-qwen has paper"):
        board = leaderboard.collect([both, paper_only], "strict")
    assert board["run"].tolist() == ["knn"]
    # On main: an empty leaderboard, exit 0.
    with pytest.raises(AglError, match="no run was scored under the 'strict' protocol"):
        leaderboard.collect([paper_only], "strict")


# --- more inputs that gave a number they should not have ----------------------------------------

def test_reparse_of_this_projects_own_file_is_refused_not_ignored(small, capfd):
    m, preds = small
    # On main --reparse was silently ignored for a predictions JSONL: the numbers were the
    # original parse, printed as if re-parsed.
    line = one_line_error(capfd, ["evaluate", str(preds), "--manifest", str(m), "--reparse"])
    assert "--reparse" in line and "published" in line


def test_a_file_whose_every_record_is_a_failure_is_not_scored(tmp_path, small, capfd):
    m, _ = small
    preds = tmp_path / "failed.jsonl"
    with PredictionWriter(preds) as w:
        for i in range(10):
            w.write(prediction(f"k{i}", status=Status.FAILED, error="HTTP 401: bad key"))
    # On main: 10000.00 km (paper) and accuracy 0, exit 0.
    line = one_line_error(capfd, ["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"])
    assert "all 10 records are failures" in line
    with pytest.raises(Exception, match="all 10 records are failures"):
        evaluate_run(run="r", predictions_path=preds, manifest_path=m, out_dir=tmp_path / "o",
                     config=EvaluateConfig(protocols=["paper"], metric_bootstrap=10, track=False))


def test_an_empty_protocol_list_is_refused(tmp_path, small):
    from agl.errors import AglError

    m, preds = small
    with pytest.raises(AglError, match="evaluate.protocols"):
        evaluate_run(run="r", predictions_path=preds, manifest_path=m, out_dir=tmp_path / "o",
                     config=EvaluateConfig(protocols=[], metric_bootstrap=10, track=False))


def test_a_fractional_infer_limit_is_refused(tmp_path):
    import sys

    from helpers import REPO

    sys.path.insert(0, str(REPO / "stages"))
    import _params
    import yaml

    from agl.errors import AglError

    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["infer"]["limit"] = 2.5  # on main: a TypeError traceback when the clips are sliced
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(AglError, match=r"infer\.limit: 2\.5"):
        _params.load("infer", path=path)


def test_a_stage_parses_its_params_once_and_again_when_they_change(tmp_path, monkeypatch):
    """A stage reading params in several calls parses the file once (about 0.035 s of CPU a
    call, ~50 calls a demo repro); a file rewritten with other bytes, even of the same size
    within the clock's tick, is read again; what a call returns is its own copy."""
    import sys

    from helpers import REPO

    sys.path.insert(0, str(REPO / "stages"))
    import _params

    from agl.core import yamlfile

    parsed = []
    real = yamlfile.load_yaml
    monkeypatch.setattr(yamlfile, "load_yaml", lambda p: parsed.append(p) or real(p))
    path = tmp_path / "params.yaml"
    line = "  seed: {}                  # bootstrap seed"  # evaluate's
    path.write_text((REPO / "params.yaml").read_text().replace(line.format(0), line.format(1), 1))
    first = _params.load("evaluate", path=path)
    first["evaluate"]["seed"] = 99
    assert _params.load("evaluate", path=path)["evaluate"]["seed"] == 1 and len(parsed) == 1
    path.write_text(path.read_text().replace(line.format(1), line.format(2), 1))  # same size
    assert _params.load("evaluate", path=path)["evaluate"]["seed"] == 2 and len(parsed) == 2
