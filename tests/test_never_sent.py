"""An attempt whose request never left this machine is recorded as such (issue 49): a request
that timed out while connecting (here: a server whose accept queue is full, so the kernel drops
the handshake; the same as a request stuck being built under load) was recorded as the server's
timeout and counted as a request to it. Real SDKs, a real socket on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest
from test_inference_api import FAST, backend_settings, keys, make_clips  # noqa: F401  (keys: autouse fixture)

from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.predictions.records import Status, read_predictions
from agl.prompts import load_prompt


@pytest.fixture
def deaf_port():
    """A port that listens but never accepts, its queue already full: a connection to it
    never completes, so no byte of a request can leave."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    filler = socket.create_connection(srv.getsockname(), timeout=2)  # takes the one place
    yield srv.getsockname()[1]
    filler.close()
    srv.close()


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_a_request_that_never_left_is_not_counted_as_one(tmp_path, api, deaf_port):
    manifest, audio = make_clips(tmp_path, 2)
    spec = ModelSpec("run", api, "fake-audio-model",
                     settings=backend_settings(api, f"http://127.0.0.1:{deaf_port}"))
    options = RunOptions(cache_dir=None, concurrency=2, timeout_s=0.4, max_retries=1, progress=False,
                         backoff=FAST)
    summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / "run",
                            audio_root=audio, options=options)
    preds = read_predictions(tmp_path / "run" / "predictions.jsonl")
    for p in preds.values():
        assert p.status is Status.FAILED
        assert "never sent" in p.error and "gave up after 2 attempts; 2 never sent, 0 request(s) sent" in p.error
    assert summary["session_requests"] == 0, summary
