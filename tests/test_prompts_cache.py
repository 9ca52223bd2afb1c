"""Prompts (named, hashed, the paper's read from its published file) and the reply cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_llm import Answer, FakeServer, openai_completion
from test_inference_api import GOOD, make_clips

from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.errors import AglError
from agl.inference.cache import ResponseCache, cache_key, generation_settings, public_settings
from agl.prompts import load_prompt, unescape_published

# The exact text sent for one sample with the default prompt. Changing the prompt must be a
# deliberate diff here (and a new file name: prompts are versioned, never edited in place).
DEFAULT_PROMPT_SNAPSHOT = """\
Listen to this field recording and work out where on Earth it was made.

Use every clue you can hear: languages, accents and words; announcements, music and songs; \
birds, insects and other animals; weather, water and terrain; traffic, vehicles, sirens, \
bells, calls to prayer and other sounds of a place.

Answer with one JSON object and nothing else, in exactly this form:
{
  "reasoning": "the clues you heard and how they point to the place",
  "city": "the nearest city or town, in English",
  "country": "the country, in English",
  "continent": "one of Africa, Asia, Europe, North America, South America, Oceania, Antarctica",
  "latitude": decimal degrees between -90 and 90 (north positive),
  "longitude": decimal degrees between -180 and 180 (east positive),
  "confidence": your probability between 0 and 1 that the country is right
}

Always give your best guess for every field, even when unsure; express doubt through \
"confidence", not by leaving fields out.
"""
DEFAULT_PROMPT_SHA256 = "3b611ba244b478e80999b481ad22da826045135da520d409ce69000cb2c8c802"
# sha256 of the prompt in the authors' inference script (AGL1K openllm.py,
# `audio_localization_prompt`), which the published `question` field must reproduce.
PAPER_PROMPT_SHA256 = "c04233477186b67a36770dcf67a6253afb0a020b8cd966e9ab5d42d2bb839f5b"


def test_default_prompt_snapshot_is_exactly_what_is_sent(tmp_path, monkeypatch):
    from agl.contracts.models import ModelSpec
    from agl.dataset.manifest import clips, load_manifest
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000000000")
    manifest, audio = make_clips(tmp_path, 1)
    with FakeServer(lambda c: Answer(200, openai_completion(GOOD))) as server:
        summary = run_inference(ModelSpec("run", "openai", "m",
                                          settings={"base_url": server.url + "/v1"}),
                                load_prompt("default"), clips(load_manifest(manifest)),
                                out_dir=tmp_path / "run", audio_root=audio,
                                options=RunOptions(progress=False))
    (call,) = server.calls
    assert call.prompt == DEFAULT_PROMPT_SNAPSHOT
    assert summary["prompt_sha256"] == DEFAULT_PROMPT_SHA256 == load_prompt().sha256
    assert summary["prompt"] == "geo-json-v1"


def test_paper_prompt_comes_from_the_published_file(qwen_published):
    p = load_prompt("agl1k-paper", source=qwen_published)
    assert p.sha256 == PAPER_PROMPT_SHA256 and p.source == str(qwen_published)
    # What the authors sent had real newlines and single quotes, not the file's CSV escapes.
    assert "\\n" not in p.text and '""' not in p.text and '"reason": "' in p.text
    raw = json.loads(Path(qwen_published).read_text())[0]["question"]
    assert "\\n" in raw and unescape_published(raw) == p.text


def test_paper_prompt_from_json_lines_and_errors(tmp_path):
    f = tmp_path / "seed_42_ABCD.jsonl"
    f.write_text(json.dumps({"question": 'Say ""hi""\\nnow', "question_id": "a"}) + "\n")
    assert load_prompt("agl1k-paper", source=f).text == 'Say "hi"\nnow'
    with pytest.raises(AglError, match="published"):
        load_prompt("agl1k-paper")
    with pytest.raises(AglError, match="known prompts"):
        load_prompt("no-such-prompt")
    f.write_text(json.dumps([{"question": "a"}, {"question": "b"}]))
    with pytest.raises(AglError, match="2 different"):
        load_prompt("agl1k-paper", source=f)


def req(**kw):
    base = dict(sample_id="s", prompt="p", audio_path=Path("a.mp3"), audio_sha256="ab" * 32)
    return Request(**{**base, **kw})


def test_cache_key_covers_what_decides_a_reply_and_no_secret():
    k = cache_key("gemini", "m", {"temperature": 0}, req())
    assert k == cache_key("gemini", "m", {"temperature": 0.0, "api_key_env": "X"}, req())
    assert k == cache_key("gemini", "m", {"temperature": 0, "base_url": "http://h:1"}, req())
    assert k == cache_key("gemini", "m", {"temperature": 0}, req(sample_id="other"))
    for other in (cache_key("openai", "m", {"temperature": 0}, req()),
                  cache_key("gemini", "m2", {"temperature": 0}, req()),
                  cache_key("gemini", "m", {"temperature": 0, "thinking_budget": 0}, req()),
                  cache_key("gemini", "m", {"temperature": 0}, req(prompt="q")),
                  cache_key("gemini", "m", {"temperature": 0}, req(system="s")),
                  cache_key("gemini", "m", {"temperature": 0}, req(audio_sha256="cd" * 32))):
        assert other != k
    s = {"api_key": "sk-LEAK", "auth_token": "t", "base_url": "https://u:pw@h/v1?key=sk-LEAK",
         "temperature": 0, "max_tokens": 5}
    assert "sk-LEAK" not in json.dumps(public_settings(s)) + json.dumps(generation_settings(s))
    assert public_settings(s)["base_url"] == "https://h/v1"


def test_cache_roundtrip_atomic_files_and_refusals(tmp_path):
    cache = ResponseCache(tmp_path)
    key = cache_key("b", "m", {}, req())
    assert cache.get(key) is None
    cache.put(key, Reply(ReplyStatus.OK, text="hi", input_tokens=3, output_tokens=1,
                         latency_s=0.5, extra={"finish_reason": "stop"}))
    got = cache.get(key)
    assert (got.text, got.input_tokens, got.extra["finish_reason"]) == ("hi", 3, "stop")
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [f"{key}.json"]
    with pytest.raises(ValueError):
        cache.put(key, Reply(ReplyStatus.FAILED, error="x"))
    # A torn entry (cannot happen with rename, but a disk can lie) is a miss, not a crash.
    next(tmp_path.rglob("*.json")).write_text('{"v": 1, "sta')
    assert cache.get(key) is None


def test_complete_sync_for_text_only_judges(tmp_path, monkeypatch):
    from agl.inference.runner import RunOptions
    from agl.inference.runner_sync import complete_sync

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000000000")
    with FakeServer(lambda c: Answer(200, openai_completion(f"echo {c.prompt}"))) as server:
        settings = {"base_url": server.url + "/v1", "temperature": 0}
        reqs = [Request(f"q{i}", f"question {i}", system="judge") for i in range(5)]
        options = RunOptions(cache_dir=tmp_path, concurrency=3, progress=False)
        replies = complete_sync("openai", "judge-model", reqs, settings=settings, options=options)
        again = complete_sync("openai", "judge-model", reqs, settings=settings, options=options)
    assert [r.text for r in replies] == [f"echo judge\nquestion {i}" for i in range(5)]
    assert all(c.audio_sha256 == [] for c in server.calls) and len(server.calls) == 5
    assert [r.text for r in again] == [r.text for r in replies]
    assert all(r.extra["cached"] for r in again)


def test_params_models_are_validated(tmp_path):
    from agl.contracts.models import parse_models
    from agl.inference.runspec import parse_infer

    ok = parse_models([{"name": "g", "backend": "gemini", "model": "x",
                        "settings": {"temperature": 0}, "price_in_per_m": 1}])
    assert ok[0].price_in_per_m == 1.0
    for bad, msg in [([{"name": "a/b", "backend": "x"}], r"models\[0\]\.name"),
                     ([{"name": "a", "backend": "x", "settings": {"api_key": "k"}}],
                      "never go in params"),
                     ([{"name": "a", "backend": "x", "colour": 1}], "unknown key"),
                     ([{"name": "a", "backend": "x"}, {"name": "a", "backend": "y"}], "twice")]:
        with pytest.raises(AglError, match=msg):
            parse_models(bad)
    with pytest.raises(AglError, match="infer: unknown"):
        parse_infer({"concurency": 3})


def test_repo_params_default_models_are_offline():
    from agl.backends import get_backend
    from agl.contracts.models import parse_models
    from agl.inference.runspec import load_params, parse_infer

    repo = Path(__file__).resolve().parents[1]
    params = load_params(repo / "params.yaml")
    models = parse_models(params["models"])
    parse_infer(params["infer"])
    for m in models:  # constructible with no key in the environment
        assert get_backend(m.backend).needs_audio in (True, False)
        assert m.backend in ("random", "random-sphere", "prior", "knn", "langprior")  # all offline


def test_backoff_and_retry_after_parsing():
    import email.utils
    import time

    from agl.backends.service import retry_after_s, retryable_status
    from agl.inference.runner import Backoff

    b = Backoff(base_s=1.0, cap_s=8.0)
    for attempt in range(6):
        d = b.delay(attempt, None)
        assert 0 <= d <= min(8.0, 2**attempt)  # full jitter under the capped exponential
    assert 3.0 <= b.delay(0, 3.0) <= 3.3  # the server's wish wins, plus at most 10%
    assert retry_after_s({"Retry-After": "7"}) == 7.0
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_s({"Retry-After": future}) <= 31
    details = {"error": {"details": [{"@type": "RetryInfo", "retryDelay": "12s"}]}}
    assert retry_after_s({}, details) == 12.0 and retry_after_s({}, None) is None
    assert all(retryable_status(c) for c in (429, 500, 502, 503, 504))
    assert not any(retryable_status(c) for c in (400, 401, 403, 404, None))
