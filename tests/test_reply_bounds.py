"""Model replies are bounded and checked (issue 24), with the real openai and google-genai SDKs
against hostile servers on 127.0.0.1.

A gzip-bomb reply (killed `agl infer` at 3 GB before), a 50 MB reply (stored verbatim), an
endless one and an HTML page with 200 are refused while they stream: the run's memory and
predictions file stay small and nothing is cached. A reply with `content: null` or "" is a
failure to retry, never an answer cached as unparseable. A replica answering 200 with HTML
is backed off like one answering 5xx. `Retry-After: soon` falls back to the backoff.
"""

from __future__ import annotations

import pytest
from fake_llm import Answer, FakeServer, gemini_response, openai_completion
from hostile_server import (
    HostileServer,
    body,
    endless,
    files_under,
    gzip_bomb,
    gzipped,
    html_page,
    json_body,
    run_measured,
)
from test_inference_api import FAST, GOOD, make_clips

from agl.backends.base import get_backend
from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.errors import AglError
from agl.inference.finalize import read_run
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.inference.runspec import parse_infer
from agl.predictions.records import Status, read_predictions
from agl.prompts import load_prompt

CAP = 100_000
OPENAI_PATH = "/v1/chat/completions"
GEMINI_PATH = "/v1beta/models/m:generateContent"
MODULES = ("numpy", "pandas", "soundfile", "httpx", "openai", "google.genai", "tqdm",
           "agl.http.client", "agl.http.transport", "agl.backends.openai_chat",
           "agl.backends.gemini", "agl.inference.model_run", "agl.commands.infer",
           "agl.commands._infer_impl")


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-OPENAI-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-GEMINI-0123456789abcdef")


def infer(api: str, url: str, tmp_path, n: int = 2):
    manifest, audio = make_clips(tmp_path, n)
    backend = ["--backend", "openai-compatible", "--base-url", f"{url}/v1"] if api == "openai" \
        else ["--backend", "gemini", "--base-url", url, "--setting", "api_version=v1beta"]
    return run_measured(["infer", *backend, "--model", "m", "--manifest", str(manifest),
                         "--audio-root", str(audio), "--out", str(tmp_path / "run"),
                         "--cache-dir", str(tmp_path / "cache"), "--setting", "temperature=0",
                         "--retries", "0", "--timeout", "10", "--max-reply-bytes", str(CAP),
                         "--no-progress"], cwd=tmp_path, preload=MODULES)


HOSTILE = {
    "gzip bomb": (lambda: gzipped(gzip_bomb(), "application/json"),
                  f"sent more than {CAP:,} bytes (after decoding)"),
    "50 MB reply": (lambda: body(b'{"pad": "' + b" " * 50_000_000 + b'"}', "application/json"),
                    "declares 50,000,011 bytes"),
    "endless reply": (lambda: endless("application/json"), f"sent more than {CAP:,} bytes"),
    "HTML page with 200": (html_page, "an HTML page with status 200"),
}


def run_in_process(api: str, url: str, tmp_path, n: int = 2):
    manifest, audio = make_clips(tmp_path, n)
    settings = ({"base_url": url + "/v1"} if api == "openai"
                else {"base_url": url, "api_version": "v1beta"})
    summary = run_inference(
        ModelSpec("run", api, "m", settings={**settings, "temperature": 0}), load_prompt(),
        clips(load_manifest(manifest)), out_dir=tmp_path / "run", audio_root=audio,
        options=RunOptions(cache_dir=tmp_path / "cache", max_retries=0, progress=False,
                           max_reply_bytes=CAP))
    return summary, read_predictions(tmp_path / "run" / "predictions.jsonl")


def assert_refused(preds, said: str, tmp_path) -> None:
    assert {p.status for p in preds.values()} == {Status.FAILED}
    for p in preds.values():
        assert said in p.error and "\n" not in p.error and p.raw_reply is None
    assert (tmp_path / "run" / "predictions.jsonl").stat().st_size < 10_000  # not 200 MB
    assert files_under(tmp_path / "cache") == []


@pytest.mark.parametrize("api", ["openai", "gemini"])
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_reply_is_refused_while_it_streams(api, kind, tmp_path):
    behaviour, said = HOSTILE[kind]
    with HostileServer({OPENAI_PATH if api == "openai" else GEMINI_PATH: behaviour()}) as s:
        summary, preds = run_in_process(api, s.url, tmp_path)
    assert summary["n_failed"] == 2
    assert_refused(preds, said, tmp_path)


@pytest.mark.parametrize("api,kind", [("openai", "gzip bomb"), ("openai", "50 MB reply"),
                                      ("gemini", "gzip bomb")])
def test_agl_infer_memory_stays_bounded(api, kind, tmp_path):
    """The whole command in a fresh interpreter: the bomb alone would hold 1 GiB, the big
    reply 50 MB (twice: two clips)."""
    behaviour, said = HOSTILE[kind]
    with HostileServer({OPENAI_PATH if api == "openai" else GEMINI_PATH: behaviour()}) as s:
        m = infer(api, s.url, tmp_path)
    assert m.rc == 1 and "no clip succeeded" in m.stderr and "Traceback" not in m.stderr
    assert_refused(read_predictions(tmp_path / "run" / "predictions.jsonl"), said, tmp_path)
    assert m.rss_growth_mb < 40 and m.seconds < 8


@pytest.mark.parametrize("api", ["openai", "gemini"])
@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_an_empty_reply_is_retried_not_cached(api, content, tmp_path):
    empty = openai_completion(content) if api == "openai" else gemini_response(content)
    good = openai_completion(GOOD) if api == "openai" else gemini_response(GOOD)
    replies = iter([empty, empty, good])
    manifest, audio = make_clips(tmp_path, 1)

    def run(max_retries: int):
        with FakeServer(lambda call: Answer(200, next(replies))) as server:
            settings = ({"base_url": server.url + "/v1"} if api == "openai"
                        else {"base_url": server.url, "api_version": "v1beta"})
            spec = ModelSpec("run", api, "m", settings={**settings, "temperature": 0})
            run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                          out_dir=tmp_path / "run", audio_root=audio,
                          options=RunOptions(cache_dir=tmp_path / "cache", max_retries=max_retries,
                                             progress=False, backoff=FAST))
        return read_run(tmp_path / "run")["clip_000"]  # with its timings (attempts)

    p = run(max_retries=0)
    assert p.status is Status.FAILED and "reply empty" in p.error
    assert files_under(tmp_path / "cache") == []  # not an answer: nothing to replay
    p = run(max_retries=1)  # the rerun asks again: the second empty one, then the answer
    assert p.status is Status.OK and p.meta["attempts"] == 2 and p.city == "Berlin"
    assert len(files_under(tmp_path / "cache")) == 1


def test_a_replica_answering_html_with_200_is_backed_off_like_a_5xx(tmp_path):
    manifest, audio = make_clips(tmp_path, 20)
    healthy = lambda call: Answer(200, openai_completion(GOOD))  # noqa: E731
    with FakeServer(healthy) as a, FakeServer(healthy) as b, \
            HostileServer({OPENAI_PATH: html_page()}) as bad, \
            HostileServer({OPENAI_PATH: body(b"not json at all", "application/json")}) as junk:
        urls = [a.url + "/v1", b.url + "/v1", bad.url + "/v1", junk.url + "/v1"]
        settings = {"base_url": urls, "endpoint_concurrency": 2, "temperature": 0,
                    "endpoint_backoff_s": 30.0}
        backend = get_backend("openai-compatible")("m", **settings)
        summary = run_inference(
            ModelSpec("run", "openai-compatible", "m", settings=settings), load_prompt(),
            clips(load_manifest(manifest)), out_dir=tmp_path / "run", audio_root=audio,
            options=RunOptions(concurrency=8, max_retries=0, progress=False, backoff=FAST),
            backend=backend)
        report = {e["url"]: e for e in backend.endpoint_report()}
    # Before: 44 of 60 clips failed on one such replica while two healthy ones sat idle.
    assert summary["n_ok"] == 20 and summary["n_failed"] == 0
    for url in (bad.url + "/v1", junk.url + "/v1"):  # tried, failed, backed off for 30 s
        assert report[url]["requests"] == report[url]["failures"] <= 2
    assert sum(report[u]["requests"] - report[u]["failures"] for u in report) == 20


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_an_unparseable_retry_after_falls_back_to_the_backoff(api, tmp_path):
    good = openai_completion(GOOD) if api == "openai" else gemini_response(GOOD)
    busy = {"error": {"code": 429, "message": "busy", "status": "RESOURCE_EXHAUSTED"}}
    path = OPENAI_PATH if api == "openai" else GEMINI_PATH
    manifest, audio = make_clips(tmp_path, 1)
    with HostileServer({path: [json_body(busy, 429, {"Retry-After": "soon"}),
                               json_body(good)]}) as server:
        settings = ({"base_url": server.url + "/v1"} if api == "openai"
                    else {"base_url": server.url, "api_version": "v1beta"})
        run_inference(ModelSpec("run", api, "m", settings=settings), load_prompt(),
                      clips(load_manifest(manifest)), out_dir=tmp_path / "run",
                      audio_root=audio,
                      options=RunOptions(max_retries=2, progress=False, backoff=FAST))
    p = read_run(tmp_path / "run")["clip_000"]
    assert p.status is Status.OK and p.meta["attempts"] == 2


def test_reply_caps_are_params_and_flags(tmp_path, capsys):
    from agl.cli import main

    assert parse_infer({"max_reply_bytes": 5}).max_reply_bytes == 5
    with pytest.raises(AglError, match="infer.max_reply_bytes: 0 is not a whole number of at least 1"):
        parse_infer({"max_reply_bytes": 0})
    manifest, _ = make_clips(tmp_path, 1)
    rc = main(["infer", "--backend", "random", "--manifest", str(manifest), "--out",
               str(tmp_path / "o"), "--max-reply-bytes", "0"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.splitlines() == [
        "agl infer: error: --max-reply-bytes must be positive, got 0"]
