"""Error modes: the rule-decided ones offline, a judge through the real openai SDK against a
fake server on 127.0.0.1, and the judge stage's table as the report reads it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_llm import Answer, FakeServer, openai_completion

from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError
from agl.judges import error_modes as ej
from agl.judges import modes as em
from agl.predictions.records import Prediction, Status


def _scored() -> pd.DataFrame:
    rows = [
        # sample, status, km, country_correct, refused, failed
        ("right", "ok", 50.0, 1.0, False, False),
        ("birds", "ok", 6000.0, 0.0, False, False),
        ("lang", "ok", 1200.0, 0.0, False, False),
        ("refuse", "refused", 10000.0, np.nan, True, False),
        ("broken", "failed", np.nan, np.nan, False, True),
        ("far_unscored", "partial", 900.0, np.nan, False, False),
        ("near_unscored", "partial", 100.0, np.nan, False, False),
    ]
    frame = pd.DataFrame(rows, columns=["sample_id", "status", "distance_km", "country_correct",
                                        "refused", "failed"])
    for c in CATEGORY_COLUMNS:
        frame[c] = 0.0
    frame["animal"] = 1.0
    frame = frame.assign(true_city="Berlin", true_country="Germany", true_continent="Europe",
                         true_lat=52.5, true_lon=13.4, pred_city="Manaus", pred_country="Brazil",
                         pred_continent="South America", pred_lat=-3.1, pred_lon=-60.0)
    return frame


def test_wrong_definition():
    wrong = em.is_wrong(_scored(), wrong_km=750)
    assert list(_scored()["sample_id"][wrong]) == ["birds", "lang", "refuse", "broken",
                                                   "far_unscored"]


def test_rule_modes_without_a_judge_never_invent_a_mode():
    modes = em.classify(_scored()).set_index("sample_id")
    assert modes.at["refuse", "mode"] == em.REFUSAL and modes.at["broken", "mode"] == em.FAILURE
    for sid in ("birds", "lang", "far_unscored"):
        assert modes.at[sid, "mode"] == em.UNJUDGED and modes.at[sid, "source"] == "none"
    table = em.distribution({"m": modes.reset_index()})
    assert table.loc["m", em.UNJUDGED] == 3 and table.loc["m", em.REFUSAL] == 1
    assert all(m in table.columns for m in em.PAPER_MODES)
    assert table.loc["m", list(em.JUDGE_MODES)].sum() == 0


def test_parse_judgement():
    assert ej.parse_judgement('{"mode": "bird bias", "why": "x"}') == ("Bird Bias", "x")
    assert ej.parse_judgement('sure: {"mode": "Over Reasoning"}')[0] == "Over-Reasoning"
    assert ej.parse_judgement('{"mode": "Refusal"}')[0] is None  # not a judge's call
    assert ej.parse_judgement("no idea")[0] is None


def test_judge_through_openai_compatible_fake_server(tmp_path):
    replies = {"birds": '{"mode": "Bird Bias", "why": "birdsong read as rainforest"}',
               "lang": '```json\n{"mode": "Language Ambiguity", "why": "German accent"}\n```',
               "far_unscored": "I cannot decide."}

    def answer(call):
        text = call.body["messages"][-1]["content"]
        text = text if isinstance(text, str) else json.dumps(text)
        for sid, reply in replies.items():
            if f"reasoning of {sid}" in text:
                return Answer(200, openai_completion(reply))
        return Answer(500, {"error": {"message": "unexpected prompt"}})

    preds = {sid: Prediction(sid, Status.OK, reasoning=f"reasoning of {sid}")
             for sid in replies}
    with FakeServer(answer) as server:
        judge = em.JudgeConfig(backend="openai-compatible", model="judge-1",
                               settings={"base_url": server.url + "/v1", "temperature": 0},
                               cache_dir=tmp_path / "cache", max_retries=0)
        config = ej.ErrorModeJudgeConfig(judge=judge)
        modes = ej.judge_modes(_scored(), preds, run="m", config=config).set_index("sample_id")
        assert len(server.calls) == 3  # refusal and failure are never sent to the judge
        prompt = server.calls[0].body["messages"][-1]["content"]
        assert "Berlin, Germany, Europe" in str(prompt) and "animal" in str(prompt)
        # a second classification is answered from the cache, not the server
        again = ej.judge_modes(_scored(), preds, run="m", config=config).set_index("sample_id")
        assert len(server.calls) == 3
    assert modes.at["birds", "mode"] == "Bird Bias" and modes.at["birds", "source"] == "judge"
    assert modes.at["lang", "mode"] == "Language Ambiguity"
    assert modes.at["far_unscored", "mode"] == em.UNJUDGED  # unusable judgement: not guessed
    assert modes.at["refuse", "mode"] == em.REFUSAL and modes.at["broken", "mode"] == em.FAILURE
    assert again.equals(modes)


def test_failed_judge_call_leaves_unjudged(tmp_path):
    with FakeServer(lambda call: Answer(400, {"error": {"message": "bad"}})) as server:
        judge = em.JudgeConfig(backend="openai-compatible", model="judge-1",
                               settings={"base_url": server.url + "/v1", "temperature": 0},
                               max_retries=0)
        modes = ej.judge_modes(_scored(), {}, run="run", config=ej.ErrorModeJudgeConfig(judge=judge))
        modes = modes.set_index("sample_id")
    assert modes.at["birds", "mode"] == em.UNJUDGED and "judge call failed" in modes.at[
        "birds", "why"]


def test_judge_stage_table_without_a_judge_is_the_rule(tmp_path):
    """The judge stage offline: no call, the record's modes; the report reads that table back."""
    from agl.report.error_modes import run_modes
    from agl.report.inputs import RunInput

    run_dir = tmp_path / "runs" / "m"
    run_dir.mkdir(parents=True)
    _scored().to_csv(run_dir / "scores_paper.csv", index=False)
    (run_dir / "metrics.json").write_text(json.dumps({"run": "m"}))
    written = ej.judge_runs([tmp_path / "runs"], tmp_path / "judges", ej.ErrorModeJudgeConfig())
    assert written == [tmp_path / "judges" / "m" / "error_modes.csv"]
    table = pd.read_csv(written[0], keep_default_na=False)
    assert list(table.columns) == list(em.COLUMNS)
    assert table.set_index("sample_id").at["refuse", "mode"] == em.REFUSAL
    read = run_modes(RunInput("m", _scored()), tmp_path / "judges", wrong_km=750)
    rule = em.classify(_scored(), wrong_km=750)
    assert read.astype(str).equals(rule.astype(str))
    # A run the judge stage did not see gets the rule, computed in place.
    assert run_modes(RunInput("other", _scored()), tmp_path / "judges", wrong_km=750).equals(rule)


def test_judge_config_reads_the_report_params():
    config = ej.ErrorModeJudgeConfig.from_params("strict", 500, {"backend": "openai-compatible", "model": "j"})
    assert config.protocol == "strict" and config.wrong_km == 500.0 and config.judge.model == "j"
    assert ej.ErrorModeJudgeConfig.from_params("paper", 750.0, None).judge is None
    with pytest.raises(AglError, match="report.protocol"):
        ej.ErrorModeJudgeConfig.from_params("loose", 750.0, None)
    with pytest.raises(AglError, match="report.judge"):
        ej.ErrorModeJudgeConfig.from_params("paper", 750.0, {"backend": "gemini"})


def test_a_judge_reply_cut_at_its_limit_is_named_truncated(tmp_path):
    """Half a verdict cut by the output limit (thinking counts): the row says truncated with
    its finish reason, no mode is read from it, and it is asked once (never retried)."""
    cut = openai_completion('{"mode": "Bird Bias", "why": "birdsong read as', finish="length")
    with FakeServer(lambda call: Answer(200, cut)) as server:
        judge = em.JudgeConfig(backend="openai-compatible", model="judge-1",
                               settings={"base_url": server.url + "/v1", "temperature": 0},
                               max_retries=2)
        modes = ej.judge_modes(_scored(), {}, run="run", config=ej.ErrorModeJudgeConfig(judge=judge))
        assert len(server.calls) == 3
    modes = modes.set_index("sample_id")
    for sid in ("birds", "lang", "far_unscored"):
        assert modes.at[sid, "mode"] == em.UNJUDGED and modes.at[sid, "source"] == "judge"
        assert modes.at[sid, "why"].startswith("judge reply truncated") and "length" in modes.at[sid, "why"]


@pytest.mark.parametrize(("settings", "match"), [
    ({"temperature": 0}, r"gemini-2.5-flash thinks.*pin thinking_budget, max_output_tokens .*"
                         r"thinking_budget: 2048, max_output_tokens: 2560"),
    ({"thinking_budget": 2048}, "pin max_output_tokens"),
    ({"thinking_budget": 2048, "max_output_tokens": 2048}, "not above thinking_budget 2048"),
])
def test_a_thinking_judge_gets_room_to_think(settings, match):
    """The roster's rule for the judge: a model the roster pins thinking for has it pinned
    here too, with an output limit above the budget; a limit at the budget is refused."""
    def load(judge):
        return ej.ErrorModeJudgeConfig.from_params("paper", 750.0, judge).judge

    with pytest.raises(AglError, match=match):
        load({"backend": "gemini", "model": "gemini-2.5-flash", "settings": settings})
    with pytest.raises(AglError, match="a thinking judge needs an output limit"):
        load({"backend": "openai-compatible", "model": "j", "settings": {"thinking_budget": 512}})
    ok = load({"backend": "gemini", "model": "gemini-2.5-flash", "settings": {
        "temperature": 0, "thinking_budget": 0, "max_output_tokens": 512}})
    assert ok.settings["thinking_budget"] == 0
    assert load({"backend": "openai-compatible", "model": "j"}).settings == {}


def test_the_judge_stage_asks_about_each_wrong_clip_once_across_reruns(tmp_path, monkeypatch):
    """One judge stage over every run: its reply cache (default cache/judges) answers what it
    has read, so a rerun after a new run asks only about the new run's clips."""
    from agl.predictions.records import write_predictions

    monkeypatch.chdir(tmp_path)
    reply = openai_completion('{"mode": "Educated Guess", "why": "a guess"}')
    with FakeServer(lambda call: Answer(200, reply)) as server:
        entry = {"backend": "openai-compatible", "model": "judge-1", "max_retries": 0,
                 "settings": {"base_url": server.url + "/v1", "temperature": 0}}
        config = ej.ErrorModeJudgeConfig.from_params("paper", 750.0, entry)
        assert config.judge.cache_dir == Path("cache/judges")

        def add_run(name: str) -> None:
            run_dir = tmp_path / "runs" / name
            run_dir.mkdir(parents=True)
            _scored().to_csv(run_dir / "scores_paper.csv", index=False)
            (run_dir / "metrics.json").write_text(json.dumps({"run": name}))
            write_predictions(run_dir / "predictions.jsonl",
                              [Prediction(sid, Status.OK, reasoning=f"{name} reasons about {sid}")
                               for sid in _scored()["sample_id"]])

        add_run("a")
        ej.judge_runs([tmp_path / "runs"], tmp_path / "judges", config)
        assert len(server.calls) == 3  # birds, lang, far_unscored: refusal and failure are the rule's
        ej.judge_runs([tmp_path / "runs"], tmp_path / "judges", config)
        assert len(server.calls) == 3  # the same runs again: every verdict from the cache
        add_run("b")
        written = ej.judge_runs([tmp_path / "runs"], tmp_path / "judges", config)
        assert len(server.calls) == 6  # only b's three clips are asked
        assert [p.parent.name for p in written] == ["a", "b"]
        nocache = ej.ErrorModeJudgeConfig.from_params("paper", 750.0, {**entry, "cache_dir": None})
        assert nocache.judge.cache_dir is None
    table = pd.read_csv(tmp_path / "judges" / "b" / "error_modes.csv", keep_default_na=False)
    assert (table.set_index("sample_id").loc[["birds", "lang", "far_unscored"], "mode"]
            == "Educated Guess").all()


def test_the_judge_stage_refuses_a_missing_runs_folder_and_a_cache_that_is_no_folder(tmp_path):
    with pytest.raises(AglError, match="no such folder of evaluated runs"):
        ej.judge_runs([tmp_path / "nowhere"], tmp_path / "judges", ej.ErrorModeJudgeConfig())
    with pytest.raises(AglError, match="report.judge.cache_dir: 5 is not a folder"):
        ej.ErrorModeJudgeConfig.from_params("paper", 750.0, {"backend": "openai-compatible",
                                                             "model": "j", "cache_dir": 5})
