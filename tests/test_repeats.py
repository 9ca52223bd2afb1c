"""Repeated runs (infer.repeats): each repeat its own cached request and draw, resumable
after kill -9 with no repeat asked twice, and their stability (mean +- std, consensus,
expected accuracy, agreement, flip rate) in metrics.json, computed by hand here."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter

import pandas as pd
import pytest
from fake_llm import Answer, FakeServer, openai_completion
from helpers import subprocess_env
from test_inference_api import make_clips
from test_inference_resume import wait_for_lines

from agl.scoring.repeats import stability

COUNTRIES = {"Germany": (52.5, 13.4), "France": (48.9, 2.35), "Italy": (41.9, 12.5)}


def table(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    """A score table: (sample_id, predicted country, country_correct)."""
    return pd.DataFrame([{"sample_id": s, "pred_country": c, "country_correct": ok,
                          "distance_km": 100.0 * (1 - ok), "city_correct": 0.0,
                          "continent_correct": 1.0, "refused": False, "failed": False,
                          "status": "ok", "pred_lat": 0.0, "pred_lon": 0.0}
                         for s, c, ok in rows])


def test_stability_by_hand():
    # truth: a and b in Germany, c in France
    r0 = table([("a", "Germany", 1.0), ("b", "France", 0.0), ("c", "France", 1.0)])
    r1 = table([("a", "Germany", 1.0), ("b", "Germany", 1.0), ("c", "Italy", 0.0)])
    r2 = table([("a", "germany ", 1.0), ("b", "Italy", 0.0), ("c", "France", 1.0)])
    s = stability([r0, r1, r2])
    assert s["n_repeats"] == 3 and s["n_clips"] == 3
    # a: all Germany (right); b: France, Germany, Italy (a 3-way tie: the earliest, France:
    # wrong); c: France twice (right), Italy once.
    assert s["consensus_country_acc"] == pytest.approx(2 / 3)
    assert s["expected_country_acc"] == pytest.approx((1 + 1 / 3 + 2 / 3) / 3)
    assert s["agreement"] == pytest.approx((1 + 1 / 3 + 2 / 3) / 3)
    assert s["flip_rate"] == pytest.approx(2 / 3)
    acc = s["metrics"]["country_acc"]
    assert acc["values"] == pytest.approx([2 / 3, 2 / 3, 2 / 3]) and acc["std"] == pytest.approx(0.0)
    # a flip rate of 2/3 and no noise at all in the accuracy: flips cancel in the mean
    assert acc["se"] == pytest.approx(0.0)
    # lmms-eval's: scores a (1, 1, 1), b (0, 1, 0), c (1, 0, 1)
    assert s["lmms_expected_accuracy"] == pytest.approx(6 / 9)
    assert s["lmms_consensus_accuracy"] == pytest.approx(2 / 3)  # a and c right in most repeats
    assert s["lmms_internal_variance"] == pytest.approx((0 + 1 / 3 + 1 / 3) / 3)
    assert s["lmms_consistency_rate"] == pytest.approx(1 / 3)  # only a: not 1 - flip rate here by chance


def test_lmms_consensus_differs_from_the_modal_answer_and_consistency_from_flips():
    """Clip x: wrong every time with three different answers (flips; lmms-consistent); clip y:
    right once of two (a tie: lmms-wrong; modal answer the first, right)."""
    r0 = table([("x", "France", 0.0), ("y", "Germany", 1.0)])
    r1 = table([("x", "Italy", 0.0), ("y", "France", 0.0)])
    s = stability([r0, r1])
    assert s["flip_rate"] == 1.0 and s["lmms_consistency_rate"] == 0.5
    assert s["consensus_country_acc"] == 0.5 and s["lmms_consensus_accuracy"] == 0.0


def _reply(country: str) -> dict:
    lat, lon = COUNTRIES[country]
    return openai_completion(json.dumps({"city": "X", "country": country, "continent": "Europe",
                                         "latitude": lat, "longitude": lon, "confidence": 0.5}))


def test_repeats_are_asked_once_each_survive_kill_9_and_are_scored(tmp_path):
    """A server answering at random (seeded, so the test knows every draw it made); the
    run killed mid-way through its repeats and resumed: every (clip, repeat) asked exactly
    once, and evaluate's stability equals the one computed from the draws."""
    manifest, audio = make_clips(tmp_path, 6)  # truth: Germany for every clip
    sha_to_key = {hashlib.sha256((audio / f"clip_{i:03d}" / "a.wav").read_bytes()).hexdigest():
                  f"clip_{i:03d}" for i in range(6)}
    rng, lock = random.Random(7), threading.Lock()
    asked: Counter = Counter()
    phase = {"hold_after": 9}

    def answer(call):
        with lock:
            if sum(asked.values()) >= phase["hold_after"]:
                return Answer(hold=True)  # in flight when the kill comes: never answered
            asked[sha_to_key[call.audio_sha256[0]]] += 1
            return Answer(200, _reply(rng.choice(list(COUNTRIES))))

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "agl.cli", "infer", "--backend", "openai-compatible", "--model",
           "m", "--manifest", str(manifest), "--audio-root", str(audio), "--out", str(out),
           "--cache-dir", str(tmp_path / "cache"), "--retries", "0", "--setting",
           "temperature=0", "--repeats", "3", "--concurrency", "1", "--no-progress"]
    env = subprocess_env()
    with FakeServer(answer) as server:
        cmd += ["--base-url", server.url + "/v1"]
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, cwd=tmp_path)
        wait_for_lines(out / "repeats" / "1" / "predictions.jsonl", 3, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        phase["hold_after"] = 10**9
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, done.stderr
        total = len(server.calls)
    # Each clip answered once per repeat (the same request three times: the server cannot
    # tell repeats apart, the cache key can); the request held at the kill was never
    # answered, so it alone was sent again.
    assert set(asked.values()) == {3} and total == 19
    runs = [out] + [out / "repeats" / str(k) for k in (1, 2)]
    records = [{json.loads(x)["sample_id"]: json.loads(x) for x in (r / "predictions.jsonl").read_text().splitlines()}
               for r in runs]
    assert all(len(r) == 6 for r in records)

    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    doc = evaluate_run("m", out / "predictions.jsonl", manifest, tmp_path / "eval",
                       EvaluateConfig(protocols=("strict",), intervals=False, track=False))
    got = doc["protocols"]["strict"]["repeats"]
    names = {k: [r[k]["country"] for r in records] for k in records[0]}
    flips = sum(len(set(v)) > 1 for v in names.values()) / 6
    right = {k: [c == "Germany" for c in v] for k, v in names.items()}
    expected = sum(sum(v) / 3 for v in right.values()) / 6
    consensus = 0
    for v in names.values():
        counts = Counter(v)
        modal = next(c for c in v if counts[c] == max(counts.values()))
        consensus += modal == "Germany"
    assert got["n_repeats"] == 3 and got["flip_rate"] == pytest.approx(flips)
    assert got["expected_country_acc"] == pytest.approx(expected)
    assert got["consensus_country_acc"] == pytest.approx(consensus / 6)
    per_run = [sum(c == "Germany" for c in (r[k]["country"] for k in r)) / 6 for r in records]
    assert got["metrics"]["country_acc"]["values"] == pytest.approx(per_run)


def test_a_bad_repeats_value_is_one_line(tmp_path):
    from agl.errors import AglError
    from agl.inference.runspec import parse_infer

    for bad in (0, -1, 1.5, True, "3", 1000):
        with pytest.raises(AglError, match="infer.repeats"):
            parse_infer({"repeats": bad})


def test_the_leaderboard_shows_mean_and_std_over_repeats(tmp_path):
    from agl.scoring.leaderboard import collect, render_rows, table_notes

    res = {"n": 3, "distance_error_km": 100.0, "country_acc": 0.5, "reject_rate": 0.0,
           "repeats": stability([table([("a", "Germany", 1.0), ("b", "France", 0.0)]),
                                 table([("a", "Germany", 1.0), ("b", "Germany", 1.0)])])}
    doc = {"run": "r", "model": "m", "dataset_clips": 2, "clips_predicted": 2, "protocols": {"paper": res}}
    (tmp_path / "metrics.json").write_text(json.dumps(doc))
    board = collect([tmp_path / "metrics.json"], "paper")
    head, rows = render_rows(board)
    assert head[-1].startswith("repeats") and rows[0][-1] == "2×: 25.0 ± 35.4, 0.75 ± 0.35; 0.50"
    assert any("flip rate" in n for n in table_notes(board))


def test_the_report_has_a_stability_section_only_for_runs_with_repeats(tmp_path):
    from agl.report.inputs import ReportInputs, ReportOptions, RunInput
    from agl.report.sections import SectionContext
    from agl.report.sections.stability import section

    rep = stability([table([("a", "Germany", 1.0), ("b", "France", 0.0)]),
                     table([("a", "Germany", 1.0), ("b", "Germany", 1.0)])])
    metrics = tmp_path / "r" / "metrics.json"
    metrics.parent.mkdir()
    metrics.write_text(json.dumps({"run": "r<b>", "protocols": {"paper": {"repeats": rep}}}))
    plain = tmp_path / "p" / "metrics.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps({"run": "p", "protocols": {"paper": {}}}))
    (tmp_path / "tables").mkdir()

    def ctx(*runs):
        return SectionContext(runs=list(runs), pipeline_runs=list(runs),
                              inputs=ReportInputs(run_dirs=()), options=ReportOptions(),
                              figs=tmp_path, tables=tmp_path / "tables")

    with_repeats = RunInput("r<b>", pd.DataFrame(), info={"metrics": str(metrics)})
    without = RunInput("p", pd.DataFrame(), info={"metrics": str(plain)})
    assert section(ctx(without)) is None
    page = section(ctx(with_repeats, without))
    assert "Stability over repeats" in page and "r&lt;b&gt;" in page and "<b>" not in page
    assert "0.750 ± 0.354" in page and "asked 2 times" in page
    assert (tmp_path / "tables" / "stability.csv").read_text().count("\n") == 2


def test_counterfactual_effects_are_read_against_the_flip_rate(tmp_path):
    from agl.report.inputs import ReportInputs, ReportOptions, RunInput
    from agl.report.sections import SectionContext
    from agl.report.sections.counterfactual import noise_floors

    rep = stability([table([("a", "Germany", 1.0), ("b", "France", 0.0)]),
                     table([("a", "Germany", 1.0), ("b", "Germany", 1.0)])])
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"run": "m", "protocols": {"paper": {"repeats": rep}}}))
    ctx = SectionContext(runs=[RunInput("m", pd.DataFrame(), info={"metrics": str(metrics)})],
                         pipeline_runs=[], inputs=ReportInputs(run_dirs=()),
                         options=ReportOptions(), figs=tmp_path, tables=tmp_path)
    text = noise_floors(ctx)
    assert "Noise floor" in text and "m: country accuracy SD 0.354 over 2 repeats" in text
    assert "50.0% of clips change country" in text
