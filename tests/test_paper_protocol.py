"""Issue 32: the paper's protocol beside the controlled one, retired models named and not
retried, and the served-model ledger.

The authors' runner is openllm.py in Rising0321/AGL1K at ab53ad0 (pinned in
agl.dataset.sources.PINNED_COMMIT); AUTHORS below transcribes, family by family, every
setting of it that reaches the model, with its line numbers, and the roster's `paper`
protocol must say the same. The real openai and google-genai SDKs talk to fake servers on
127.0.0.1 (tests/fake_llm.py).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from fake_llm import Answer, FakeServer, gemini_response, openai_completion
from test_inference_api import FAST, GOOD, make_clips

from agl.backends import get_backend
from agl.contracts.calls import Request
from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.inference.model_run import run_inference
from agl.inference.params_run import summary_line
from agl.inference.roster import load_roster
from agl.inference.runner import RunOptions, complete
from agl.prompts import load_prompt

# The gateway call of gemini_gpt_process (openllm.py L769-815, reached for gemini / gpt ids
# through L1449-1450): model = the authors' --model (L889, their result folder's name),
# messages = one user turn, text then input_audio base64 with format "mp3" (L778-800), and
# nothing else: no temperature, no top_p, no token limit (L801-803).
GATEWAY_LINES = "L769-815, L1449-1450"
GATEWAY_IDS = {
    "gemini-3-pro": "google/gemini-3-pro-preview",
    "gemini-25-pro": "gemini-2.5-pro",
    "gemini-20-flash": "google/gemini-2.0-flash-001",
    "gemini-20-flash-thinking": "gemini-2.0-flash-thinking-exp",
    "gemini-20-flash-lite": "google/gemini-2.0-flash-lite-001",
    "gemini-25-flash": "google/gemini-2.5-flash",
    "gpt-4o-audio-preview": "gpt-4o-audio-preview",
    "gemini-25-flash-lite": "google/gemini-2.5-flash-lite",
}
QWEN_SYSTEM = ("You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable "
               "of perceiving auditory and visual inputs, as well as generating text and speech.")
# roster name -> (openllm.py lines, settings the paper protocol must carry, settings it must not)
AUTHORS = {
    **{name: (GATEWAY_LINES, {"audio_format": "mp3"},
              ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed"))
       for name in GATEWAY_IDS},  # (no seed either: theirs seeds torch, L1387, not the API)
    # gemini_gpt_process_pre L708-731: the one qwen request the runner builds.
    "qwen3-omni": ("L708-731", {"audio_format": "mp3", "audio_data_uri": True,  # L712-713
                                "modalities": ["text"],  # L727
                                "extra_body": {"enable_thinking": False},  # L728
                                "stream": True},  # L729-730
                   ("temperature", "top_p", "max_tokens")),
    # minicpm_audio_process: sampling=True, temperature=0.3 (L363-364), 2048 tokens (L346, L365)
    # and the one seed the authors ran, 42 (--num_seeds default, L885; seeded L1385-1388)
    # and chat()'s other sampling defaults (top_p 0.8, top_k 100, repetition_penalty 1.05);
    # the prompt before the waveform (L356)
    "minicpm-o-26": ("L346-369, L885", {"temperature": 0.3, "max_tokens": 2048, "seed": 42,
                                        "top_p": 0.8, "audio_first": False,
                                        "extra_body": {"top_k": 100, "repetition_penalty": 1.05}},
                     ()),
    # qwen2_5Omni_process: system prompt (L424, L432-434), 2048 tokens (L418, L468), greedy (L469)
    "qwen25-omni": ("L418-470", {"system_prompt": QWEN_SYSTEM, "max_new_tokens": 2048,
                                 "do_sample": False}, ("temperature",)),
    # gemma3n_audio_process: system prompt (L303-304), 256 tokens, greedy (L287, L327)
    "gemma-3n-e4b-it": ("L287-327", {"system_prompt": "You are a helpful assistant for "
                                                      "geographic audio localization.",
                                     "max_new_tokens": 256, "do_sample": False}, ("temperature",)),
    # kimi_audio_process sampling_params (L1104-1113, L497-508): text_temperature 0.0,
    # text_top_k 5, text_repetition_penalty 1.0 reach the text it returns (output_type text, L518)
    "kimi-audio": ("L497-518, L1104-1113", {"temperature": 0.0,
                                            "extra_body": {"top_k": 5, "repetition_penalty": 1.0}},
                   ()),
    # phi4_mm1_process: max_new_tokens=512, do_sample=False (L257-262)
    "phi-4-multimodal": ("L257-262", {"max_new_tokens": 512, "do_sample": False}, ("temperature",)),
    # mimo_audio_process: audio_understanding_sft(audio, prompt, thinking) and nothing else
    # (L392-399): the MiMo-Audio library's audio_understanding sampler decides, temperature 0.3,
    # top_p 0.95 (its task_sampler_configs), not the server's defaults
    # and the MiMo library puts the audio before the prompt (get_audio_understanding_sft_prompt)
    "mimo-audio": ("L392-399, L885", {"seed": 42, "temperature": 0.3, "top_p": 0.95,
                                      "audio_first": True}, ("max_tokens",)),
    "mimo-audio-think": ("L392-399, L1166", {"seed": 42, "temperature": 0.3, "top_p": 0.95,
                                             "audio_first": True,
                                             "extra_body": {"chat_template_kwargs": {"enable_thinking": True}}},
                         ("max_tokens",)),
}


def test_the_paper_protocol_is_the_authors_runner_family_by_family():
    paper = {r.spec.name: r.spec for r in load_roster(protocol="paper")}
    controlled = {r.spec.name: r.spec for r in load_roster(protocol="controlled")}
    assert set(AUTHORS) == set(paper) == set(controlled)
    for name, (lines, must, never) in AUTHORS.items():
        spec = paper[name]
        assert spec.protocol == "paper" and controlled[name].protocol == "controlled"
        for key, value in must.items():
            assert spec.settings.get(key) == value, (name, lines, key)
        for key in never:
            assert key not in spec.settings, (name, lines, key)
        if name in GATEWAY_IDS:
            assert (spec.backend, spec.model) == ("openai-compatible", GATEWAY_IDS[name]), name
            assert spec.settings["base_url_env"] == "AGL_GATEWAY_URL"
        # The local families run one clip at a time under paper, as the authors did; batching
        # stays a controlled choice.
        if spec.backend == "transformers":
            assert spec.settings["batch_size"] == 1 and controlled[name].settings["batch_size"] > 1, name
        # The controlled protocol stays today's: greedy, 512 tokens where the roster sets a limit.
        c = controlled[name].settings
        assert c.get("temperature") == 0 or c.get("max_new_tokens") == 512, name


def _wav(tmp_path: Path) -> Path:
    manifest, audio = make_clips(tmp_path, 1)
    return next(audio.rglob("*.wav"))


async def _send(spec: ModelSpec, settings: dict, wav: Path):
    backend = get_backend(spec.backend)(spec.model, **settings)
    try:
        return await complete(backend, [Request("c", "Where?", audio_path=wav)], cache=None,
                              concurrency=1, timeout_s=10, max_retries=0)
    finally:
        await backend.aclose()


@pytest.mark.parametrize("name", ["gemini-25-flash", "gpt-4o-audio-preview"])
def test_paper_gateway_requests_are_the_authors_shape(tmp_path, monkeypatch, name):
    import asyncio

    wav = _wav(tmp_path)
    spec = {r.spec.name: r.spec for r in load_roster(protocol="paper")}[name]
    with FakeServer(lambda call: Answer(body=openai_completion(GOOD))) as server:
        monkeypatch.setenv("AGL_GATEWAY_URL", server.url + "/v1")
        monkeypatch.setenv("AGL_GATEWAY_KEY", "gw-test-0123456789abcdef")
        [reply] = asyncio.run(_send(spec, spec.settings, wav))
        [call] = server.calls
    assert reply.status.value == "ok"
    assert call.path == "/v1/chat/completions"
    audio = base64.b64encode(wav.read_bytes()).decode("ascii")
    assert call.body == {"model": GATEWAY_IDS[name], "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Where?"},
        {"type": "input_audio", "input_audio": {"data": audio, "format": "mp3"}}]}]}


def test_controlled_requests_are_todays(tmp_path, monkeypatch):
    import asyncio

    wav = _wav(tmp_path)
    roster = {r.spec.name: r.spec for r in load_roster(protocol="controlled")}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-0123456789abcdef")

    def answer(call):
        if "/v1beta/models/" in call.path:
            return Answer(body=gemini_response(GOOD))
        return Answer(body=openai_completion(GOOD))

    with FakeServer(answer) as server:
        gpt, gem = roster["gpt-4o-audio-preview"], roster["gemini-25-flash"]
        asyncio.run(_send(gpt, {**gpt.settings, "base_url": server.url + "/v1"}, wav))
        asyncio.run(_send(gem, {**gem.settings, "base_url": server.url,
                                "api_version": "v1beta"}, wav))
        openai_call, gemini_call = server.calls
    body = openai_call.body
    assert body["model"] == "gpt-4o-audio-preview" and body["temperature"] == 0
    assert body["modalities"] == ["text"]
    assert body["messages"][0]["content"][1]["input_audio"]["format"] == "wav"
    assert gemini_call.path.startswith("/v1beta/models/gemini-2.5-flash:generateContent")
    assert gemini_call.body["generationConfig"]["temperature"] == 0


def _infer(tmp_path: Path, argv: list[str], capsys) -> tuple[int, str]:
    from agl.cli import main

    manifest, audio = make_clips(tmp_path, 6)
    rc = main(["infer", *argv, "--manifest", str(manifest), "--audio-root", str(audio),
               "--out", str(tmp_path / "out"), "--no-progress", "--cache-dir",
               str(tmp_path / "cache"), "--concurrency", "4"])
    return rc, capsys.readouterr().err


OPENAI_GONE = {"error": {"message": "The model `gpt-4o-audio-preview` does not exist or you do "
                                   "not have access to it.", "type": "invalid_request_error",
                        "param": None, "code": "model_not_found"}}
# vLLM's answer for a model it does not serve (an OpenAI-compatible server's equivalent)
VLLM_GONE = {"object": "error", "message": "The model `gpt-4o-audio-preview` does not exist.",
             "type": "NotFoundError", "param": None, "code": 404}


@pytest.mark.parametrize(("backend", "body"), [("openai", OPENAI_GONE),
                                               ("openai-compatible", VLLM_GONE)])
def test_a_retired_openai_model_stops_the_run_in_one_line(tmp_path, monkeypatch, capsys,
                                                          backend, body):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    with FakeServer(lambda call: Answer(404, body)) as server:
        rc, err = _infer(tmp_path, ["--backend", backend, "--model", "gpt-4o-audio-preview",
                                    "--setting", f"base_url={server.url}/v1",
                                    "--setting", "temperature=0"], capsys)
        sent = len(server.calls)
    assert rc != 0 and sent <= 2, (rc, sent)
    [line] = [x for x in err.splitlines() if "gone" in x]
    assert "gpt-4o-audio-preview" in line and "does not exist" in line
    assert "gpt-audio" in line and "retired" in line and "Traceback" not in err
    assert not list((tmp_path / "cache").rglob("*.json"))
    assert not (tmp_path / "out" / "predictions.jsonl").exists() or not (
        tmp_path / "out" / "predictions.jsonl").read_text().strip()


def test_a_retired_gemini_model_stops_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-0123456789abcdef")
    gone = {"error": {"code": 404, "status": "NOT_FOUND", "message":
                      "models/gemini-2.0-flash-001 is not found for API version v1beta, or is "
                      "not supported for generateContent."}}

    def answer(call):
        if call.path.startswith("/v1beta/models/gemini-2.0-flash-001:generateContent"):
            return Answer(404, gone)
        return Answer(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                      "message": f"unexpected route {call.path}"}})

    with FakeServer(answer) as server:
        rc, err = _infer(tmp_path, ["--backend", "gemini", "--model", "gemini-2.0-flash-001",
                                    "--setting", f"base_url={server.url}",
                                    "--setting", "api_version=v1beta",
                                    "--setting", "temperature=0"], capsys)
        sent = len(server.calls)
    assert rc != 0 and sent <= 2, (rc, sent)
    [line] = [x for x in err.splitlines() if "gone" in x]
    assert "gemini-2.0-flash-001" in line and "NOT_FOUND" in line and "gemini-2.5-flash" in line
    assert not list((tmp_path / "cache").rglob("*.json"))


def test_dry_run_names_a_retired_entry(tmp_path, capsys):
    from agl.cli import main

    manifest, audio = make_clips(tmp_path, 2)
    rc = main(["infer", "--backend", "openai", "--model", "gpt-4o-audio-preview", "--dry-run",
               "--manifest", str(manifest), "--audio-root", str(audio), "--out",
               str(tmp_path / "out"), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "is retired (2026-05, UKGovernmentBEIS/inspect_ai #3980" in out
    assert "successor 'gpt-audio'" in out


@pytest.mark.parametrize("name", ["mimo-audio", "mimo-audio-think", "minicpm-o-26"])
def test_paper_sends_the_authors_part_order(tmp_path, name):
    """Through the openai SDK to a server on 127.0.0.1: MiMo-Audio's paper entries put the clip
    before the prompt (the MiMo library's order), MiniCPM-o's keep the prompt first (L356), and
    controlled sends the prompt first for both."""
    import asyncio

    wav = _wav(tmp_path)
    orders = {}
    for protocol in ("paper", "controlled"):
        spec = {r.spec.name: r.spec for r in load_roster(protocol=protocol)}[name]
        with FakeServer(lambda call: Answer(body=openai_completion(GOOD))) as server:
            settings = {**spec.settings, "base_url": server.url + "/v1"}
            [reply] = asyncio.run(_send(spec, settings, wav))
            [call] = server.calls
        assert reply.status.value == "ok"
        content = call.body["messages"][-1]["content"]
        orders[protocol] = [p["type"] for p in content]
        assert [p["text"] for p in content if p["type"] == "text"] == ["Where?"]
    paper_order = ["input_audio", "text"] if name.startswith("mimo") else ["text", "input_audio"]
    assert orders == {"paper": paper_order, "controlled": ["text", "input_audio"]}


def test_audio_first_must_be_true_or_false():
    from agl.errors import AglError

    with pytest.raises(AglError, match="audio_first"):
        get_backend("openai-compatible").check_settings({"audio_first": "yes"}, "models.x.settings")


def test_models_lists_both_protocols_and_the_retirements(capsys):
    from agl.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert out.count(" controlled ") == 16 and out.count(" paper ") >= 16
    assert "RETIRED 2026-05, UKGovernmentBEIS/inspect_ai #3980" in out
    assert main(["models", "--yaml", "gemini-2.5-flash", "--protocol", "paper"]) == 0
    paper = capsys.readouterr().out
    assert "protocol: paper" in paper and "google/gemini-2.5-flash" in paper
    assert "temperature" not in paper
    assert main(["models", "--yaml", "gemini-2.5-flash"]) == 0
    assert "temperature: 0" in capsys.readouterr().out


def test_models_check_sorts_ids_and_says_it_needs_the_network(monkeypatch, capsys):
    from agl.cli import main

    for k in ("OPENAI_API_KEY", "GEMINI_API_KEY", "AGL_GATEWAY_URL", "AGL_GATEWAY_KEY"):
        monkeypatch.delenv(k, raising=False)
    assert main(["models", "--check"]) != 0
    assert "needs the network" in capsys.readouterr().err
    listing = {"object": "list", "data": [
        {"id": i, "object": "model", "created": 0, "owned_by": "x"}
        for i in ("gpt-audio", "google/gemini-2.5-flash", "google/gemini-2.5-pro-preview-06-05")]}
    with FakeServer(lambda call: Answer(body=listing)) as server:
        monkeypatch.setenv("AGL_GATEWAY_URL", server.url + "/v1")
        monkeypatch.setenv("AGL_GATEWAY_KEY", "gw-test-0123456789abcdef")
        assert main(["models", "--check"]) == 0
    rows = {line.split()[2]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["gemini-25-flash"].endswith("available")
    assert "renamed: listed as google/gemini-2.5-pro-preview-06-05" in rows["gemini-25-pro"]
    assert "gone (roster: retired 2026-05" in rows["gpt-4o-audio-preview"]
    assert "successor gpt-audio (listed)" in rows["gpt-4o-audio-preview"]
    # Offline: a gateway that does not answer is one line, not a traceback.
    monkeypatch.setenv("AGL_GATEWAY_URL", "http://127.0.0.1:9/v1")
    assert main(["models", "--check"]) != 0
    assert "needs the network" in capsys.readouterr().err


SERVED = ("gpt-4o-audio-preview-2024-12-17", "gpt-4o-mini-audio-preview-2024-12-17")


def _ledger_run(tmp_path: Path, out: str, server) -> dict:
    manifest, audio = make_clips(tmp_path, 4)
    spec = ModelSpec(out, "openai", "gpt-4o-audio-preview", protocol="controlled",
                     settings={"base_url": server.url + "/v1", "temperature": 0, "seed": 42})
    options = RunOptions(cache_dir=tmp_path / "cache", concurrency=1, timeout_s=10,
                         max_retries=0, progress=False, backoff=FAST)
    return run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                         out_dir=tmp_path / out, audio_root=audio, options=options)


def test_the_served_model_ledger_flags_a_mismatch_and_a_change(tmp_path, monkeypatch):
    from agl.scoring import leaderboard

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")

    def answer(call):  # the first two clips by the asked model's snapshot, then another
        body = openai_completion(GOOD)
        body["model"] = SERVED[call.n > 2]
        body["system_fingerprint"] = f"fp_{1 + (call.n > 2)}"
        return Answer(body=body)

    run = tmp_path / "run"
    with FakeServer(answer) as server:
        first = _ledger_run(tmp_path, "run", server)
        replay = _ledger_run(tmp_path, "replay", server)  # every reply from the cache
        # A replay in the run's own folder (as `dvc repro -f` runs it), its timings file gone:
        # the cache answers every clip again, and the tracked files come back byte for byte.
        before = {name: (run / name).read_bytes() for name in ("predictions.jsonl", "run_summary.json")}
        (run / "run_summary.timings.json").unlink()
        again = _ledger_run(tmp_path, "run", server)
        assert len(server.calls) == 4
    assert again["session_cache_hits"] == 4 and again["served_flags"] == first["served_flags"]
    assert {name: (run / name).read_bytes() for name in before} == before
    assert replay["session_cache_hits"] == 4 and replay["served_models"] == first["served_models"]
    assert first["served_models"] == {SERVED[0]: 0.5, SERVED[1]: 0.5}
    assert first["system_fingerprints"] == {"fp_1": 0.5, "fp_2": 0.5}
    flags = first["served_flags"]
    assert any(f"'{SERVED[1]}' for 2 of 4" in f and "not the asked" in f for f in flags)
    assert any("changed during the run" in f for f in flags)
    assert not any(SERVED[0] in f and "not the asked" in f for f in flags)  # a dated snapshot
    assert "WARNING: the served model changed" in summary_line(first)
    assert first["run_protocol"] == "controlled"
    # Tracked: the summary a reader must see (shares and flags) in run_summary.json; never the
    # per-clip ids, the clip count or the rotating fingerprints (those stay in the timings).
    tracked = json.loads((run / "run_summary.json").read_text())
    assert tracked["served_models"] == first["served_models"] and tracked["served_flags"] == flags
    assert tracked["run_protocol"] == "controlled" and tracked["settings"]["seed"] == 42
    assert "served_clips" not in tracked and "system_fingerprints" not in tracked
    preds = (run / "predictions.jsonl").read_text()
    assert "served" not in preds and SERVED[0] not in preds
    for name in ("predictions.jsonl", "run_summary.json"):
        text = (run / name).read_text()
        assert "fp_1" not in text and "fp_2" not in text
        assert text.replace('"replay"', '"run"') == (
            tmp_path / "replay" / name).read_text().replace('"replay"', '"run"')
    timings = json.loads((tmp_path / "replay" / "run_summary.timings.json").read_text())
    assert timings["system_fingerprints"] == first["system_fingerprints"]  # the cache kept them
    assert timings["clips"] and all("served_model" in c for c in timings["clips"].values())
    # MLflow's view of the run (the evaluate stage logs it), the leaderboard and the report.
    import mlflow

    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    # MLflow's file store: real MLflow, without a database's schema migrations (seconds).
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    doc = evaluate_run("run", run / "predictions.jsonl", tmp_path / "manifest.csv",
                       run, EvaluateConfig(protocols=("strict",), intervals=False,
                                           experiment="issue32"))
    logged = mlflow.get_run(doc["mlflow_run_id"]).data
    assert logged.metrics[f"run.served_share.{SERVED[1]}"] == 0.5
    assert "changed during the run" in logged.tags["served_flags"]
    assert logged.tags["run_protocol"] == "controlled"
    assert "served" not in (run / "metrics.json").read_text()
    assert leaderboard.served_lines([run / "metrics.json"])["run"] == flags
    _the_leaderboard_and_the_report_show(tmp_path, flags)


def test_a_run_whose_replies_name_no_served_model_tracks_no_ledger(tmp_path):
    """An offline backend (the demo's random, prior, knn, langprior) names no served model:
    its run_summary.json has no served keys, so the demo's tracked outputs are as before."""
    manifest, audio = make_clips(tmp_path, 3)
    options = RunOptions(cache_dir=tmp_path / "cache", progress=False)
    summary = run_inference(ModelSpec("random", "random", "uniform-latlon", settings={"seed": 0}),
                            load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / "random",
                            audio_root=audio, options=options)
    assert summary["n_recorded"] == 3 and not any(k.startswith("served") for k in summary)
    for name in ("run_summary.json", "run_summary.timings.json", "predictions.jsonl"):
        assert "served" not in (tmp_path / "random" / name).read_text(), name


def _the_leaderboard_and_the_report_show(tmp_path: Path, flags: list[str]) -> None:
    """The flagged run "§" in leaderboard.md / .html / .csv and in report.html (from the
    leaderboard, and without one); the note under the table names its flags."""
    import html

    import pandas as pd

    from agl.report.build import build_report
    from agl.report.inputs import ReportOptions, collect_runs
    from agl.report.page import render_page
    from agl.scoring import leaderboard

    board = leaderboard.collect([tmp_path / "run" / "metrics.json"], "strict")
    leaderboard.write(leaderboard.attach_paper(board, None), tmp_path / "lb", protocol="strict")
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "| 1 | run § | gpt-4o-audio-preview |" in md
    note = "run: " + "; ".join(flags)
    assert 'A run marked "§" was answered, by the provider' in md and note in md
    assert html.escape(note) in (tmp_path / "lb" / "leaderboard.html").read_text()
    assert pd.read_csv(tmp_path / "lb" / "leaderboard.csv")["served_flags"].tolist() == ["; ".join(flags)]
    # The report's leaderboard section renders the stage's CSV (the other sections are not
    # under test here: no figures drawn), and a report built without a leaderboard marks the
    # run in its table of headline numbers.
    options = ReportOptions(protocol="strict", group_bootstrap=20, factor_bootstrap=5,
                            paired_bootstrap=20, paired_permutations=20, maps_for=0)
    csv = tmp_path / "lb" / "leaderboard.csv"
    page = render_page([], pd.read_csv(csv), options, None, {}, csv)
    assert "<td>run §</td>" in page and html.escape(note) in page
    build_report(collect_runs([tmp_path], "strict"), tmp_path / "report", options=options)
    page = (tmp_path / "report" / "report.html").read_text()
    assert "No leaderboard" in page and "<td>run §</td>" in page and html.escape(note) in page


def test_leaderboard_marks_a_row_not_run_under_the_papers_protocol(tmp_path):
    from agl.dataset.sources import paper_values
    from agl.scoring import leaderboard

    files = []
    for run, protocol in (("gemini-25-flash", "controlled"), ("gemini-25-flash-p", "paper"),
                          ("mine", "controlled")):
        doc = {"run": run, "model": "gemini-2.5-flash", "backend": "gemini",
               "paper_name": "" if run == "mine" else "Gemini 2.5 Flash",
               "run_protocol": protocol, "data_version": "d", "dataset": "AGL1K",
               "dataset_clips": 4, "clips_predicted": 4,
               "protocols": {"paper": {**{c: 1.0 for c in leaderboard.COLUMNS}, "n": 4,
                                       "reject_rate": 0.0, "ci95": {}}}}
        path = tmp_path / run / "metrics.json"
        path.parent.mkdir()
        path.write_text(json.dumps(doc))
        files.append(path)
    board = leaderboard.attach_paper(leaderboard.collect(files, "paper"), paper_values())
    leaderboard.write(board, tmp_path / "lb", protocol="paper")
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "| gemini-25-flash ‡ |" in md and "| gemini-25-flash-p |" in md and "| mine |" in md
    assert "gemini-25-flash (controlled)" in md and "two different experiments" in md


def test_paper_qwen3_omni_streams_dashscopes_request(tmp_path, monkeypatch):
    import asyncio

    wav = _wav(tmp_path)
    spec = {r.spec.name: r.spec for r in load_roster(protocol="paper")}["qwen3-omni"]
    chunks = [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "qwen3-omni-flash",
               "choices": [{"index": 0, "delta": {"content": part}, "finish_reason": None}]}
              for part in (GOOD[:40], GOOD[40:])]
    chunks.append({"id": "c", "object": "chat.completion.chunk", "created": 0,
                   "model": "qwen3-omni-flash-2025-12-01", "choices": [],
                   "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}})
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    with FakeServer(lambda call: Answer(body=sse, headers={"Content-Type": "text/event-stream"})) as server:
        monkeypatch.setenv("AGL_GATEWAY_URL", server.url + "/v1")
        monkeypatch.setenv("AGL_GATEWAY_KEY", "gw-test-0123456789abcdef")
        [reply] = asyncio.run(_send(spec, spec.settings, wav))
        [call] = server.calls
    assert reply.status.value == "ok" and reply.text == GOOD and reply.output_tokens == 4
    assert reply.extra["served_model"] == "qwen3-omni-flash-2025-12-01"
    audio = call.body["messages"][0]["content"][1]["input_audio"]
    assert audio["format"] == "mp3" and audio["data"].startswith("data:;base64,")
    assert call.body["model"] == "qwen3-omni-flash" and call.body["modalities"] == ["text"]
    assert call.body["stream"] is True and call.body["enable_thinking"] is False
    assert "temperature" not in call.body and "max_tokens" not in call.body


def test_a_seed_names_its_own_run_folder(capsys):
    import yaml

    from agl.cli import main

    assert main(["models", "--yaml", "minicpm-o-26", "--protocol", "paper", "--seed", "43"]) == 0
    entry = yaml.safe_load(capsys.readouterr().out)
    assert list(entry) == ["minicpm-o-26-seed43"]
    assert entry["minicpm-o-26-seed43"]["settings"]["seed"] == 43
    assert main(["models", "--yaml", "phi-4-multimodal", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "decodes greedily, so every seed gives the same answers" in out
    assert "build/runs/phi-4-multimodal-seed7/efficiency.jsonl" in out


@pytest.mark.parametrize(("code", "status", "message", "gone"), [
    (404, "NOT_FOUND", "models/gemini-1.5-pro is not found for API version v1beta", True),
    (400, "FAILED_PRECONDITION", "Gemini 1.0 Pro Vision has been deprecated on July 12, 2024. "
                                 "Consider switching to a different model.", True),
    (400, "INVALID_ARGUMENT", "This model is no longer available to new users.", True),
    # a parameter deprecated for a model, a file gone: not the model's retirement
    (400, "INVALID_ARGUMENT", "response_mime_type is deprecated for model gemini-2.5-pro", False),
    (404, "NOT_FOUND", "File files/abc123 is not found.", False),
    (429, "RESOURCE_EXHAUSTED", "Quota exceeded for model gemini-2.5-pro", False),
])
def test_which_gemini_errors_mean_the_model_is_gone(code, status, message, gone):
    from agl.backends.gemini import model_gone

    assert model_gone(code, status, message) is gone


def test_a_retired_model_stops_after_one_request_when_the_first_clip_is_cached(tmp_path, monkeypatch, capsys):
    """The first clip answered from the reply cache told nothing of the model, yet it was the
    run's probe: a retired model got every pending clip at once (7 requests at concurrency 16).
    And a rerun after such a stop writes no clip twice (issue 49)."""
    import json as _json

    from fake_llm import openai_completion

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    good = openai_completion('{"city": "Berlin", "country": "Germany", "continent": "Europe", '
                             '"latitude": 52.5, "longitude": 13.4}')
    args = ["--backend", "openai", "--model", "gpt-4o-audio-preview", "--setting", "temperature=0"]
    with FakeServer(lambda call: Answer(200, good)) as server:  # clip 0 into the reply cache
        rc, err = _infer(tmp_path, [*args, "--setting", f"base_url={server.url}/v1", "--limit", "1"], capsys)
    assert rc == 0, err
    import shutil

    shutil.rmtree(tmp_path / "out")  # a new run of the same model: its clip 0 in the cache
    with FakeServer(lambda call: Answer(404, OPENAI_GONE)) as server:
        rc, err = _infer(tmp_path, [*args, "--setting", f"base_url={server.url}/v1"], capsys)
        sent = len(server.calls)
    assert rc != 0 and sent == 1, (rc, sent, err)

    def lines_per_clip() -> list[str]:
        path = tmp_path / "out" / "predictions.jsonl"
        return [_json.loads(x)["sample_id"] for x in path.read_text().splitlines() if x.strip()] \
            if path.exists() else []

    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    nobody = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"  # bound, never listening: refused
    for stop in ("gone", "gone", "no network"):  # each rerun served clip 0 from the cache again
        if stop == "gone":
            with FakeServer(lambda call: Answer(404, OPENAI_GONE)) as server:
                rc, err = _infer(tmp_path, [*args, "--setting", f"base_url={server.url}/v1"], capsys)
        else:
            rc, err = _infer(tmp_path, [*args, "--setting", f"base_url={nobody}", "--retries", "0"], capsys)
        keys = lines_per_clip()
        assert rc != 0 and keys and len(keys) == len(set(keys)), (stop, keys, err[-500:])
    closed.close()
    with FakeServer(lambda call: Answer(200, good)) as server:  # the model back: a rerun
        rc, err = _infer(tmp_path, [*args, "--setting", f"base_url={server.url}/v1"], capsys)
    assert rc == 0, err
    keys = lines_per_clip()
    assert len(keys) == 6 and len(set(keys)) == 6, keys
