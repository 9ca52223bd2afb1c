"""A reply cut at the output limit is a status of its own: `truncated`, with its stop reason,
never retried, never a refusal, counted in the run summary, `agl evaluate --json` and the
leaderboard (the real openai and google-genai SDKs against a fake server on 127.0.0.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fake_llm import Answer, FakeServer
from test_inference_api import FAST, backend_settings, body_for

from agl.cli import main
from agl.contracts.models import ModelSpec
from agl.dataset.manifest import CATEGORY_COLUMNS, clips, load_manifest, write_manifest
from agl.errors import AglError
from agl.inference.model_run import run_inference
from agl.inference.params_run import summary_line
from agl.inference.runner import RunOptions
from agl.predictions.records import Status, read_predictions
from agl.prompts import load_prompt

HALF = '{"reasoning": "surf, gulls and a muezzin at dusk", "city": "Essaouira", "country": "Moro'
N = 6


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-CUT-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-CUT-0123456789abcdef")


def _clips(root: Path) -> tuple[Path, Path]:
    import numpy as np
    import soundfile as sf

    rows = []
    for i in range(N):
        key = f"clip_{i:03d}"
        (root / "audio" / key).mkdir(parents=True)
        sf.write(root / "audio" / key / "a.wav", 0.1 * np.sin(np.arange(1600) * (0.1 + i / 50)), 16000)
        rows.append({"key": key, "longitude": -9.77, "latitude": 31.5, "mp3name": "a.wav",
                     "mp3seconds": 0.1, "city": "Essaouira", "country": "Morocco",
                     "continent": "Africa", **{c: 1.0 for c in CATEGORY_COLUMNS}})
    write_manifest(pd.DataFrame(rows), root / "manifest.csv")
    return root / "manifest.csv", root / "audio"


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_half_a_json_object_at_the_limit_is_truncated_never_retried(tmp_path, api, capsys):
    manifest, audio = _clips(tmp_path)
    finish = "length" if api == "openai" else "MAX_TOKENS"

    def answer(call):  # the last clip's reply is cut before any text
        empty = call.n == N
        if api == "gemini":
            return Answer(200, body_for(api, None if empty else HALF, finish=finish, thoughts=478))
        return Answer(200, body_for(api, "" if empty else HALF, finish=finish))

    with FakeServer(answer) as server:
        spec = ModelSpec("run", api, "fake", settings=backend_settings(api, server.url))
        options = RunOptions(cache_dir=tmp_path / "cache", concurrency=1, timeout_s=10,
                             max_retries=3, progress=False, backoff=FAST)
        summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                                out_dir=tmp_path / "run", audio_root=audio, options=options)
        assert len(server.calls) == N  # not one retried, the empty one included
    records = list(read_predictions(tmp_path / "run" / "predictions.jsonl").values())
    assert {p.status for p in records} == {Status.TRUNCATED}
    assert all(p.meta["finish_reason"] == finish and not p.refused for p in records)
    assert all("output limit" in p.error for p in records)
    if api == "gemini":
        assert all(p.meta["thinking_tokens"] == 478 for p in records)
    cut = [p for p in records if p.raw_reply]
    # What the cut text holds, read as the parser reads any reply (the country cut to "Moro").
    assert len(cut) == N - 1 and all(p.city == "Essaouira" and p.latitude is None for p in cut)
    assert summary["n_truncated"] == N and summary["n_refused"] == 0
    assert summary["n_partial"] == summary["n_unparseable"] == summary["n_failed"] == 0
    assert "truncated 6" in summary_line(summary)

    # agl evaluate --json counts them; strict counts each a failure, paper scores the fields.
    for protocol in ("paper", "strict"):
        capsys.readouterr()
        assert main(["evaluate", str(tmp_path / "run" / "predictions.jsonl"), "--manifest",
                     str(manifest), "--protocol", protocol, "--json", "--bootstrap", "0"]) == 0
        res = json.loads(capsys.readouterr().out)
        res = res.get("protocols", {}).get(protocol, res)
        assert res["n_truncated"] == N and res["n_refused"] == 0, res
        if protocol == "strict":
            assert res["failure_rate"] == 1.0
        else:
            # scored as any record is under the paper's rule (no coordinates: 10,000 km), not
            # failures
            assert res["failure_rate"] == 0.0 and res["n_city_scored"] == N


def test_a_run_without_cut_replies_keeps_its_files_bytes(tmp_path):
    """No `n_truncated` key where nothing was cut (the demo's outputs stay as they were)."""
    from agl.scoring.metrics import counts

    frame = pd.DataFrame({"status": ["ok"], "refused": [False], "pred_lat": [1.0],
                          "pred_lon": [1.0], "distance_km": [1.0]})
    assert "n_truncated" not in counts(frame)


def test_the_leaderboard_notes_a_run_with_many_cut_replies(tmp_path):
    from agl.scoring.leaderboard import collect, table_notes

    base = {"n": 100, "distance_error_km": 1000.0, "reject_rate": 0.0, "ci95": {}}
    for run, cut in (("cut", 5), ("fine", 1)):
        doc = {"run": run, "data_version": "v", "dataset_clips": 100, "clips_predicted": 100,
               "audio_tags_sent": run == "cut", "cost_usd": 2.0 if run == "cut" else 0.0,
               "protocols": {"paper": {**base, "country_acc": 0.4,
                                       **({"n_truncated": cut} if cut else {})}}}
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.json").write_text(json.dumps(doc))
    board = collect(sorted(tmp_path.glob("*/metrics.json")), "paper", truncated_note=0.01)
    notes = " ".join(table_notes(board))
    assert "cut (5 of 100)" in notes and "fine (" not in notes
    assert "container tags" in notes and "cut" in notes.split("container tags")[1][:200]
    # A priced run: what one correct country cost ($2 over 40 correct countries).
    from agl.scoring.leaderboard import render_rows

    head, rows = render_rows(board)
    assert head[-1] == "USD per correct country"
    cells = {r[1]: r[-1] for r in rows}
    assert cells["cut"] == "0.0500" and cells["fine"] == ""


def test_a_spend_cap_of_two_requests_asks_two_clips_and_a_higher_one_the_rest(tmp_path):
    """infer.max_spend_usd: a fake priced server, a cap of two requests' worth: exactly two
    clips asked, the rest recorded as not asked; a rerun with a higher cap asks only those."""
    from agl.contracts.calls import Request
    from agl.inference.spend import SpendCap

    manifest, audio = _clips(tmp_path)
    good = json.dumps({"reasoning": "r", "city": "Essaouira", "country": "Morocco",
                       "continent": "Africa", "latitude": 31.5, "longitude": -9.77})
    settings_extra = {"max_tokens": 100, "audio_tokens_per_s": 32}
    prices = {"price_in_per_m": 2.0, "price_out_per_m": 10.0}
    with FakeServer(lambda call: Answer(200, body_for("openai", good, tokens=(200, 100)))) as server:
        spec = ModelSpec("run", "openai", "fake", settings={**backend_settings("openai", server.url),
                                                            **settings_extra}, **prices)
        one = SpendCap(1.0, 2.0, 10.0, spec.settings).estimate_usd(
            Request("clip_000", load_prompt().text, audio / "clip_000" / "a.wav"))
        asked = []
        for cap, expect in ((2 * one, 2), (100 * one, N - 2)):
            options = RunOptions(cache_dir=None, concurrency=1, timeout_s=10, max_retries=0,
                                 progress=False, backoff=FAST, max_spend_usd=cap)
            before = len(server.calls)
            summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                                    out_dir=tmp_path / "run", audio_root=audio, options=options)
            assert len(server.calls) - before == expect
            asked.append(summary)
    first, second = asked
    assert first["n_ok"] == 2 and first["n_not_asked"] == N - 2 and first["n_failed"] == N - 2
    assert "not asked" in summary_line(first) and "infer.max_spend_usd" in summary_line(first)
    assert second["n_ok"] == N and "n_not_asked" not in second
    assert second["session_requests"] == N - 2


def test_audio_tokens_are_priced_apart_where_the_provider_bills_them_apart():
    from agl.contracts.calls import Reply, ReplyStatus
    from agl.contracts.models import parse_models
    from agl.inference.runner import cost_usd

    reply = Reply(ReplyStatus.OK, text="x", input_tokens=1000, output_tokens=100,
                  extra={"audio_tokens": 800})
    # 200 text tokens at $0.30, 800 audio tokens at $1.00, 100 out at $2.50 (Gemini 2.5 Flash)
    assert cost_usd(reply, 0.3, 2.5, 1.0) == pytest.approx((200 * 0.3 + 800 * 1.0 + 100 * 2.5) / 1e6)
    assert cost_usd(reply, 0.3, 2.5) == pytest.approx((1000 * 0.3 + 100 * 2.5) / 1e6)
    (spec,) = parse_models({"m": {"backend": "gemini", "model": "x", "price_in_per_m": 0.3,
                                  "price_audio_in_per_m": 1.0, "price_out_per_m": 2.5}})
    assert spec.price_audio_in_per_m == 1.0


def test_the_eee_record_carries_cut_replies_and_a_run_sent_with_tags():
    from agl.interchange.eee_export import _generation

    extra = _generation({}, {}, {"n_truncated": 3, "audio_tags_sent": True,
                                 "n_refused": 0})["additional_details"]
    assert extra["n_truncated"] == "3" and extra["audio_tags_sent"] == "True"
    assert "audio_tags_sent" not in _generation({}, {}, {"n_refused": 0})["additional_details"]


def test_a_total_over_the_build_counts_every_recorded_run(tmp_path, monkeypatch):
    """infer.max_total_spend_usd: what the build's records already spent (another run's, the
    newest line per clip) plus this run's stays within the total; the clips past it are not
    asked, as under the run's cap, and a rerun with a higher total asks only those. With no
    total, no record outside the run is read."""
    from agl.contracts.calls import Request
    from agl.inference import spend as spend_mod
    from agl.inference.runspec import parse_infer
    from agl.inference.spend import SpendCap, recorded_spend

    manifest, audio = _clips(tmp_path)
    runs = tmp_path / "build" / "runs"
    (runs / "other").mkdir(parents=True)
    # clip a twice (an older line 9.0 the newer 0.004 replaced), clip b 0.002, one non-record
    (runs / "other" / "predictions.jsonl").write_text("\n".join([
        json.dumps({"sample_id": "a", "status": "ok", "meta": {"cost_usd": 9.0}}),
        json.dumps({"sample_id": "b", "status": "ok", "meta": {"cost_usd": 0.002}}),
        json.dumps({"sample_id": "a", "status": "ok", "meta": {"cost_usd": 0.004}}),
        "not json"]) + "\n")
    assert recorded_spend([runs, tmp_path / "absent"]) == pytest.approx(0.006)
    good = json.dumps({"reasoning": "r", "city": "Essaouira", "country": "Morocco",
                       "continent": "Africa", "latitude": 31.5, "longitude": -9.77})
    with FakeServer(lambda call: Answer(200, body_for("openai", good, tokens=(200, 100)))) as server:
        spec = ModelSpec("run", "openai", "fake", settings={**backend_settings("openai", server.url),
                                                            "max_tokens": 100},
                         price_in_per_m=2.0, price_out_per_m=10.0)
        one = SpendCap(None, 2.0, 10.0, spec.settings).estimate_usd(
            Request("clip_000", load_prompt().text, audio / "clip_000" / "a.wav"))

        def run(total):
            options = RunOptions(cache_dir=None, concurrency=1, timeout_s=10, max_retries=0,
                                 progress=False, backoff=FAST, max_total_spend_usd=total,
                                 spend_roots=(str(runs),))
            before = len(server.calls)
            summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                                    out_dir=runs / "run", audio_root=audio, options=options)
            return len(server.calls) - before, summary

        asked, first = run(0.006 + 2 * one)
        assert asked == 2 and first["n_ok"] == 2 and first["n_not_asked"] == N - 2
        line = summary_line(first)
        assert "not asked" in line and "infer.max_total_spend_usd" in line
        preds = read_predictions(runs / "run" / "predictions.jsonl")
        assert any("would pass infer.max_total_spend_usd" in (p.error or "") for p in preds.values())
        # The same total again: this run's own records now count, nothing more is asked.
        assert run(0.006 + 2 * one)[0] == 0
        asked, second = run(0.006 + 100 * one)
        assert asked == N - 2 and second["n_ok"] == N and "n_not_asked" not in second
        # No total: the build's records are never read.
        monkeypatch.setattr(spend_mod, "recorded_spend", lambda roots: pytest.fail("read"))
        monkeypatch.setattr("agl.inference.executors.local.recorded_spend",
                            lambda roots: pytest.fail("read"))
        assert run(None)[1]["n_ok"] == N
    assert parse_infer({"max_total_spend_usd": 5}).max_total_spend_usd == 5
    for bad in (0, -1.0, True, "5"):
        with pytest.raises(AglError, match="infer.max_total_spend_usd"):
            parse_infer({"max_total_spend_usd": bad})


@pytest.mark.parametrize("kind", ["batch", "ray"])
def test_a_spend_cap_where_it_cannot_hold_is_one_line_before_any_request(tmp_path, kind):
    """A batch job (submitted whole) and Ray shards (no shared purse) cannot stop at a cap:
    a run with one is refused in one line, nothing sent."""
    from agl.executor.config import ExecutorConfig

    manifest, audio = _clips(tmp_path)
    with FakeServer(lambda call: Answer(500, {})) as server:
        settings = {**backend_settings("openai", server.url), **({"mode": "batch"} if kind == "batch" else {})}
        spec = ModelSpec("run", "openai", "fake", settings=settings, price_in_per_m=2.0, price_out_per_m=10.0)
        for caps in ({"max_spend_usd": 1.0}, {"max_total_spend_usd": 1.0}):
            options = RunOptions(cache_dir=None, concurrency=1, timeout_s=10, max_retries=0,
                                 progress=False, backoff=FAST, transport=ExecutorConfig(kind=kind)
                                 if kind == "ray" else ExecutorConfig(), **caps)
            with pytest.raises(AglError, match=rf"infer.{next(iter(caps))} is held by the local "
                                               rf"executor only \(the {kind} executor"):
                run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                              out_dir=tmp_path / "run", audio_root=audio, options=options)
        assert server.calls == []
