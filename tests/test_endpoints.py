"""Many replicas of one model (`base_url` a list): least-loaded routing, per-endpoint
concurrency, a replica that dies mid-run, and per-endpoint accounting."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest
from fake_llm import Answer, FakeServer, openai_completion
from test_inference_api import FAST, GOOD, make_clips

from agl.backends.endpoints import Endpoint, EndpointPool, parse_endpoints, pool_capacity
from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.errors import AglError
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.predictions.records import Status, read_predictions
from agl.prompts import load_prompt


def test_three_replicas_one_stopped_mid_run(tmp_path):
    manifest, audio = make_clips(tmp_path, 24)
    lock = threading.Lock()
    answered: list[str] = []  # audio hashes that got a reply, from any replica
    doomed: dict[str, FakeServer] = {}

    def healthy(call):
        with lock:
            answered.extend(call.audio_sha256)
        return Answer(200, openai_completion(GOOD))

    def dying(call):
        # Answers two requests, then drops the connection of every later one and stops
        # listening: in-flight requests fail, new connections are refused.
        if call.n <= 2:
            return healthy(call)
        if call.n == 3:
            doomed["server"].stop()
        return Answer(drop=True)

    with FakeServer(healthy) as a, FakeServer(healthy) as b, FakeServer(dying) as c:
        doomed["server"] = c
        urls = [a.url + "/v1", {"url": b.url + "/v1", "concurrency": 2}, c.url + "/v1"]
        settings = {"base_url": urls, "endpoint_concurrency": 3, "temperature": 0, "endpoint_backoff_s": 0.01}
        from agl.backends.base import get_backend

        backend = get_backend("openai-compatible")("fake-audio-model", **settings)
        summary = run_inference(
            ModelSpec("run", "openai-compatible", "fake-audio-model", settings=settings),
            load_prompt(),
            clips(load_manifest(manifest)),
            out_dir=tmp_path / "run",
            audio_root=audio,
            options=RunOptions(cache_dir=None, concurrency=pool_capacity(settings), timeout_s=30,
                               max_retries=3, progress=False, backoff=FAST),
            backend=backend,
        )
        report = {e["url"]: e for e in backend.endpoint_report()}
        served = {s.url: len(s.calls) for s in (a, b, c)}

    preds = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert summary["complete"] and len(preds) == 24
    assert all(p.status is Status.OK for p in preds.values())
    # Every clip answered exactly once: no answered clip was asked again.
    assert len(answered) == 24 and max(Counter(answered).values()) == 1
    # The dead replica answered its two, then failed; the others took the rest.
    dead = report[c.url + "/v1"]
    assert dead["failures"] >= 1 and dead["requests"] - dead["failures"] == 2
    ok = sum(e["requests"] - e["failures"] for e in report.values())
    assert ok == 24  # the per-endpoint counts add up to the run
    assert report[b.url + "/v1"]["concurrency"] == 2 and report[a.url + "/v1"]["concurrency"] == 3
    # What each server saw matches what the pool counted (refused connections never arrive).
    assert served[a.url] == report[a.url + "/v1"]["requests"]
    assert served[b.url] == report[b.url + "/v1"]["requests"]


def test_least_loaded_routing_respects_each_capacity():
    async def go():
        eps = [Endpoint("a", 2), Endpoint("b", 1)]
        pool = EndpointPool(eps, is_endpoint_failure=lambda e: isinstance(e, ConnectionError))
        peak = Counter()
        gate = asyncio.Event()

        async def work(ep):
            peak[ep.url] = max(peak[ep.url], ep.in_flight)
            await gate.wait()
            return ep.url

        tasks = [asyncio.ensure_future(pool.call(work)) for _ in range(6)]
        for _ in range(5):
            await asyncio.sleep(0)
        in_flight = {e.url: e.in_flight for e in eps}
        gate.set()
        done = await asyncio.gather(*tasks)
        return in_flight, peak, done, pool.report()

    in_flight, peak, done, report = asyncio.run(go())
    assert in_flight == {"a": 2, "b": 1} and peak == {"a": 2, "b": 1}
    assert len(done) == 6 and sum(e["requests"] for e in report) == 6


def test_endpoint_failure_retries_elsewhere_and_backs_off():
    async def go():
        eps = [Endpoint("down", 4), Endpoint("up", 4)]
        pool = EndpointPool(eps, is_endpoint_failure=lambda e: isinstance(e, ConnectionError), backoff_s=60)

        async def work(ep):
            if ep.url == "down":
                raise ConnectionError("refused")
            return ep.url

        first = [await pool.call(work) for _ in range(3)]

        async def bad_request(ep):
            raise ValueError("400: not the endpoint's fault")

        with pytest.raises(ValueError):
            await pool.call(bad_request)
        return first, {e["url"]: e for e in pool.report()}

    first, report = asyncio.run(go())
    assert first == ["up", "up", "up"]
    assert report["down"]["requests"] == 1  # backed off after its one failure
    assert report["up"]["requests"] == 4 and report["up"]["failures"] == 1


@pytest.mark.parametrize(
    "bad", [[], [""], [{"url": "http://a", "concurrency": 0}], ["http://a", "http://a"], [{"concurrency": 2}]]
)
def test_bad_endpoint_lists_are_one_line_errors(bad):
    with pytest.raises(AglError, match="base_url"):
        parse_endpoints(bad, 4)


def test_cli_takes_repeated_base_urls_and_prints_each_endpoint(tmp_path, capsys):
    from agl.cli import main

    manifest, audio = make_clips(tmp_path, 6)
    ok = lambda call: Answer(200, openai_completion(GOOD))  # noqa: E731
    with FakeServer(ok) as a, FakeServer(ok) as b:
        rc = main(
            [
                "infer",
                "--backend",
                "openai-compatible",
                "--model",
                "m",
                "--base-url",
                a.url + "/v1",
                "--base-url",
                b.url + "/v1",
                "--manifest",
                str(manifest),
                "--audio-root",
                str(audio),
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
                "--cache-dir",
                "",
            ]
        )
        calls = len(a.calls) + len(b.calls)
    err = capsys.readouterr().err
    assert rc == 0 and calls == 6
    assert f"{a.url}/v1: " in err and f"{b.url}/v1: " in err
    assert '"endpoints"' not in (tmp_path / "run" / "run_summary.json").read_text()  # timings stay out


@pytest.mark.parametrize(("status", "retry_after"), [(429, None), (429, "1"), (500, None)],
                         ids=["429", "429-retry-after", "500"])
def test_one_endpoints_429_stays_with_the_clip_that_met_it(tmp_path, status, retry_after):
    """One endpoint; one clip's request meets a 429 (or a 500) once, every other request is
    answered. The failure backs the endpoint off (endpoint_backoff_s longer than the request
    timeout), so the clips queued behind it wait: they are delayed, never failed with a timeout
    or a 429 they did not meet, and the clip that met it is answered on its retry. The run's
    request count is what the server received: a wait in the queue is no request."""
    manifest, audio = make_clips(tmp_path, 6)
    lock = threading.Lock()
    met: list[str] = []  # the audio hash of the clip whose request met the failure

    def answer(call):
        with lock:
            if call.n == 2:  # the first request after the probe's
                met.extend(call.audio_sha256)
                return Answer(status, {"error": {"message": "busy", "type": "server_busy"}},
                              headers={"Retry-After": retry_after} if retry_after else {})
        return Answer(200, openai_completion(GOOD))

    with FakeServer(answer) as server:
        settings = {"base_url": [server.url + "/v1"], "temperature": 0,
                    "endpoint_backoff_s": 1.6}  # longer than timeout_s: waiting is not sending
        from agl.backends.base import get_backend

        backend = get_backend("openai-compatible")("fake-audio-model", **settings)
        summary = run_inference(
            ModelSpec("run", "openai-compatible", "fake-audio-model", settings=settings),
            load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / "run",
            audio_root=audio,
            options=RunOptions(cache_dir=None, concurrency=pool_capacity(settings), timeout_s=1.0,
                               max_retries=2, progress=False, backoff=FAST),
            backend=backend,
        )
        received = len(server.calls)
        per_clip = Counter(h for c in server.calls for h in c.audio_sha256)
    preds = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert len(met) == 1 and per_clip[met[0]] == 2  # met it once, answered on the retry
    bad = {k: p.error for k, p in preds.items() if p.status is not Status.OK}
    assert not bad, bad
    assert not [k for k, p in preds.items() if str(status) in str(p.error or "")]
    assert summary["complete"] and summary["n_ok"] == 6
    assert received == 7 and summary["session_requests"] == received
    (endpoint,) = backend.endpoint_report()
    assert endpoint["requests"] == received and endpoint["failures"] == 1
