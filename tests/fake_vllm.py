"""A fake vLLM OpenAI-compatible server: validates chat requests the way vLLM's does.

What vLLM (>= 0.12) does with a `/v1/chat/completions` body, from its documentation and its
`chat_utils` / protocol models, checked here before a reply is sent:

* `model` must be the served model name (`--served-model-name`, default the model id);
  another name is a 404 "The model `X` does not exist.".
* content parts: `text`, `image_url`, `audio_url`, `input_audio`, `video_url`. An
  `input_audio` part is `{"data": <base64>, "format": <ext>}`, turned into
  `data:audio/<format>;base64,<data>` and decoded (librosa/soundfile): undecodable audio is
  a 400. `audio_url` is `{"url": "data:..." | "http(s)://..."}`.
* at most `--limit-mm-per-prompt` audio items per request (here 1, the paper's one clip).
* `response_format`: `text`, `json_object` or `json_schema`; the last needs
  `json_schema.name` and the schema under `json_schema.schema`.
* `guided_json` / `guided_regex` / `guided_choice` were removed in 0.12 (now
  `structured_outputs`): the real server ignores them with a warning, so a client relying on
  them would get unconstrained text. The fake answers 400 instead, so tests catch it.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Callable

from fake_llm import Answer, Call, openai_completion

PART_TYPES = {"text", "image_url", "audio_url", "input_audio", "video_url"}
REMOVED = {
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "guided_decoding_backend",
    "guided_whitespace_pattern",
}


def _error(status: int, message: str) -> Answer:
    return Answer(
        status,
        {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "code": status,
            "error": {"message": message},
        },
    )


def check_request(body: object, served_model: str, audio_limit: int = 1) -> str | None:
    """The reason vLLM would refuse this chat request (or silently ignore part of it)."""
    import soundfile as sf

    if not isinstance(body, dict):
        return "body is not a JSON object"
    if body.get("model") != served_model:
        return f"404 The model `{body.get('model')}` does not exist."
    removed = REMOVED & set(body)
    if removed:
        return f"{sorted(removed)} were removed in vLLM 0.12 (use structured_outputs)"
    n_audio = 0
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            continue
        for part in content or []:
            kind = part.get("type")
            if kind not in PART_TYPES:
                return f"unknown content part type {kind!r}"
            if kind == "input_audio":
                audio = part.get("input_audio") or {}
                if not audio.get("data") or not audio.get("format"):
                    return "input_audio needs data and format"
                try:
                    raw = base64.b64decode(audio["data"], validate=True)
                    sf.info(io.BytesIO(raw))
                except (binascii.Error, ValueError, RuntimeError, sf.LibsndfileError) as exc:
                    return f"input_audio does not decode as {audio['format']}: {exc}"
                n_audio += 1
            elif kind == "audio_url":
                url = (part.get("audio_url") or {}).get("url", "")
                if not url.startswith(("data:audio/", "http://", "https://", "file:")):
                    return f"audio_url.url {url[:30]!r} is not a data: or http(s) URL"
                n_audio += 1
    if n_audio > audio_limit:
        return f"At most {audio_limit} audio(s) may be provided in one prompt."
    fmt = body.get("response_format")
    if fmt is not None:
        kind = fmt.get("type")
        if kind not in ("text", "json_object", "json_schema", "structural_tag"):
            return f"response_format.type {kind!r} is not supported"
        if kind == "json_schema":
            js = fmt.get("json_schema") or {}
            if not js.get("name") or not isinstance(js.get("schema"), dict):
                return "response_format.json_schema needs name and schema"
    return None


def vllm_answer(served_model: str, reply: str) -> Callable[[Call], Answer]:
    def answer(call: Call) -> Answer:
        if not call.path.endswith("/chat/completions"):
            return _error(404, f"no route {call.path}")
        problem = check_request(call.body, served_model)
        if problem is not None:
            return _error(404 if problem.startswith("404") else 400, problem)
        return Answer(200, openai_completion(reply))

    return answer
