"""The paper's server-only models (MiMo-Audio, Kimi-Audio, MiniCPM-o): the roster's entries
send requests a vLLM server accepts (tests/fake_vllm.py validates them as vLLM does)."""

from __future__ import annotations

import hashlib
import json

import pytest
from fake_llm import FakeServer
from fake_vllm import check_request, vllm_answer

from agl.backends.base import get_backend
from agl.contracts.calls import Request
from agl.core.container import strip
from agl.inference.roster import load_roster
from agl.predictions.parse import parse_reply

GOOD = json.dumps(
    {
        "reasoning": "gulls and a muezzin",
        "city": "Essaouira",
        "country": "Morocco",
        "continent": "Africa",
        "latitude": 31.51,
        "longitude": -9.77,
        "confidence": 0.4,
    }
)
# Both protocols: the paper entries send the authors' sampling (MiniCPM-o's top_k and
# repetition_penalty through extra_body) and MiMo-Audio's part order.
SERVED = [r for protocol in ("controlled", "paper") for r in load_roster(protocol=protocol)
          if r.spec.backend == "openai-compatible" and "base_url" in r.spec.settings]


@pytest.mark.parametrize("json_schema", [False, True])
@pytest.mark.parametrize("entry", SERVED, ids=[f"{r.spec.name}-{r.spec.protocol}" for r in SERVED])
def test_roster_request_is_what_vllm_accepts(entry, json_schema, real_mp3s):
    import asyncio

    mp3 = real_mp3s[0]
    with FakeServer(vllm_answer(entry.spec.model, GOOD)) as server:
        settings = {**entry.spec.settings, "base_url": server.url + "/v1", "json_schema": json_schema}
        backend = get_backend(entry.spec.backend)(entry.spec.model, **settings)

        async def go():
            try:
                return await backend.generate(Request("s1", "Where?", audio_path=mp3))
            finally:
                await backend.aclose()

        reply = asyncio.run(go())
        (call,) = server.calls
    assert reply.status.value == "ok" and parse_reply("s1", reply.text).latitude == 31.51
    # what was sent: the clip without its tags (agl.backends.base.sent_audio)
    assert call.audio_sha256 == [hashlib.sha256(strip(mp3.read_bytes(), ".mp3")).hexdigest()]
    part = [p for p in call.body["messages"][-1]["content"] if p["type"] == "input_audio"][0]
    assert part["input_audio"]["format"] == "mp3"
    assert ("response_format" in call.body) is json_schema
    extra = entry.spec.settings.get("extra_body") or {}
    for k, v in extra.items():  # e.g. MiMo's thinking switch reaches the server
        assert call.body[k] == v


def test_fake_vllm_refuses_what_vllm_refuses(real_mp3s):
    import base64

    audio = base64.b64encode(real_mp3s[0].read_bytes()).decode()
    ok = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x"},
                    {"type": "input_audio", "input_audio": {"data": audio, "format": "mp3"}},
                ],
            }
        ],
    }
    assert check_request(ok, "m") is None
    assert "does not exist" in check_request(ok, "other")
    assert "removed" in check_request({**ok, "guided_json": {}}, "m")
    bad_audio = json.loads(json.dumps(ok))
    bad_audio["messages"][0]["content"][1]["input_audio"]["data"] = base64.b64encode(b"not audio at all").decode()
    assert "does not decode" in check_request(bad_audio, "m")
    two = json.loads(json.dumps(ok))
    two["messages"][0]["content"].append(two["messages"][0]["content"][1])
    assert "At most 1 audio" in check_request(two, "m")
    schema_without_name = {**ok, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}
    assert "needs name" in check_request(schema_without_name, "m")
