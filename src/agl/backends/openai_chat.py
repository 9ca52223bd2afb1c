"""`openai` and `openai-compatible`: chat completions with `input_audio`.

`openai` is OpenAI's own service (gpt-4o-audio-preview and later audio models; key from
OPENAI_API_KEY). `openai-compatible` is the same client against any `base_url` (vLLM
serving Qwen2-Audio / Qwen2.5-Omni / Voxtral, hosted gateways), so open models scale out on
servers; its key comes from the variable named by `api_key_env`, and a server that needs no
key is sent the token "EMPTY" (the SDK refuses none), as vLLM documents. Settings:

  temperature, top_p, seed, max_tokens (or max_completion_tokens)   generation
  json_schema: true        request `response_format` with `agl.prompts.ANSWER_SCHEMA`
  base_url, api_key_env    endpoint and key variable
  base_url_env             the variable holding the endpoint instead, for a URL that carries
                           a credential (user:password@ for HTTP Basic auth, ?api-key=...):
                           such a URL is refused in params.yaml and on the command line, and
                           every credential in it is scrubbed from all output (agl.core.secrets)
  extra_body               passed through to servers with their own options (vLLM)
  base_url: [url, ...]     (openai-compatible) replicas of one model: see agl.backends.endpoints
  audio_format: mp3        the `input_audio.format` label whatever the file's suffix (the
                           authors' runner always says mp3: openllm.py L792)
  audio_data_uri: true     send the audio as `data:;base64,...` (DashScope's form, L712)
  modalities, stream       sent as given (the paper protocol's Qwen3-Omni call, L727-730);
                           a streamed reply is read whole before it is parsed
  audio_first: true        the clip's part before the prompt's (default: the prompt first).
                           The paper protocol's MiMo-Audio entries set it: the MiMo library's
                           audio_understanding_sft puts the audio before the text. A server
                           whose chat template takes a string (vLLM's `string` content format)
                           moves every audio placeholder to the front anyway unless it runs
                           with --interleave-mm-strings (docs/paper.md)

What a server heard (`heard_s_reported`, issue 45): OpenAI counts `audio_tokens` in its usage;
a vLLM server gives only `prompt_tokens`. With the setting `audio_tokens_per_s` (the served
model's audio encoder rate, e.g. 25 for Qwen2-Audio's Whisper encoder: 750 tokens per 30 s),
an `openai-compatible` reply without `audio_tokens` counts its audio as its prompt tokens less
the text's, the text's counted by the server itself (vLLM's `POST /tokenize` of the same
messages without the audio, once per prompt): `audio_tokens_from: tokenize`. Without the
setting, or where the server has no /tokenize, nothing is reported: never guessed.

The reply keeps what the provider says answered (`served_model`: response.model,
`system_fingerprint`), beside the asked `model`: volatile facts, kept out of the cache key
and of the tracked record (agl.inference.finalize.VOLATILE_META). A 404 `model_not_found`
(or a server's "model ... does not exist", a `model_decommissioned`) is a retired model:
`BackendError(gone=True)`, which stops the run (agl.inference.runner).

The SDK's own retries are off (`max_retries=0`): the runner retries with jitter and honours
Retry-After. A `refusal` in the reply, or finish reason `content_filter`, is a refusal.
Replies are read through a bounded transport (`agl.backends.service.client_args`: a size cap
after decoding, no HTML error pages, redirects on the host). A success that is not a
completion (an HTML page, not JSON, no choices) or carries no text (`content` null or "") is
a failure to retry, never an answer to cache.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import openai

from agl.backends.base import SERVICE_SETTINGS, Backend, BackendError, part_audio, sent_audio_async
from agl.backends.endpoints import pooled_client
from agl.backends.service import (
    UnreadableReply,
    api_key,
    is_deterministic,
    openai_http_client,
    refusal,
    retry_after_s,
    retryable_status,
)
from agl.contracts.calls import OUTPUT_LIMIT_REASONS, Reply, ReplyStatus, Request
from agl.errors import AglError
from agl.http.client import Refused
from agl.prompts import ANSWER_SCHEMA

_GENERATION = ("temperature", "top_p", "seed", "max_tokens", "max_completion_tokens",
               "frequency_penalty", "presence_penalty")
_FORMATS = {".mp3": "mp3", ".wav": "wav"}


class OpenAIChat(Backend):
    name = "openai"  # its entry in the index (agl.backends)
    default_key_envs: tuple[str, ...] = ("OPENAI_API_KEY",)
    key_required = True
    probe_first = True
    over_http = True
    multi_part = True  # long_audio multi_part: the windows as several input_audio parts
    # OpenAI's audio models count 10 audio tokens per second (1 per 100 ms); a server that
    # counts otherwise (vLLM: the encoder's rate) sets `audio_tokens_per_s`.
    audio_tokens_per_s = 10.0
    example_model = "gpt-4o-audio-preview"
    settings_rules: ClassVar[dict[str, str | None]] = {
        **SERVICE_SETTINGS, "base_url_env": None, "temperature": "nonnegative",
        "top_p": "share_closed", "seed": "integer", "max_tokens": "count",
        "max_completion_tokens": "count", "frequency_penalty": "number",
        "presence_penalty": "number", "extra_body": None, "modalities": None, "stream": "bool",
        "audio_format": None, "audio_data_uri": "bool", "audio_first": "bool"}

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        self.deterministic = is_deterministic(settings)
        self._key = api_key(settings, self.default_key_envs, self.name,
                            required=self.key_required)
        self.require_model()  # after the key: without one, the key is what to set first
        self._base_url = base_url(settings, self.name)
        self._client = None

    def get_client(self):
        """The SDK client, made on first use (with the reply caps; the batch provider shares it)."""
        if self._client is None:
            self._client = openai.AsyncOpenAI(api_key=self._key or "EMPTY", max_retries=0,
                                       http_client=openai_http_client(self),
                                       **client_url(self._base_url))
        return self._client

    async def _audio_content(self, request: Request) -> dict[str, Any]:
        path = Path(request.audio_path)  # type: ignore[arg-type]
        # A long clip's window is a cut WAV (agl.inference.windowed), whatever `audio_format`
        # says of the published files (the paper gateway entries' mp3)
        fmt = "wav" if request.window is not None else (
            self.settings.get("audio_format") or _FORMATS.get(path.suffix.lower()))
        if fmt is None:
            raise BackendError(f"clip {request.sample_id}: chat completions take mp3 or wav "
                               "audio only", retryable=False)
        data = await sent_audio_async(request)  # no tags, unless the protocol sends them
        text = base64.b64encode(data).decode("ascii")
        if self.settings.get("audio_data_uri"):
            text = "data:;base64," + text
        return {"type": "input_audio", "input_audio": {"data": text, "format": fmt}}

    async def _parts_content(self, request: Request) -> list[dict[str, Any]]:
        """A multi_part request's windows as input_audio parts, in time order (WAV, whatever
        `audio_format` says of whole files: these bytes are WAV)."""
        out = []
        for data in await part_audio(request):
            text = base64.b64encode(data).decode("ascii")
            if self.settings.get("audio_data_uri"):
                text = "data:;base64," + text
            out.append({"type": "input_audio", "input_audio": {"data": text, "format": "wav"}})
        return out

    async def chat_request(self, request: Request) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for `request`; the batch
        path (agl.inference.batch.providers.openai) sends the same body."""
        content: list[dict[str, Any]] = [{"type": "text", "text": request.prompt}]
        if request.audio_path is not None:
            # The part order reaches the model (a family's own runner may put the clip first).
            audio = (await self._parts_content(request) if request.parts
                     else [await self._audio_content(request)])
            content = [*audio, *content] if self.settings.get("audio_first") else [*content, *audio]
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.append({"role": "user", "content": content})
        kw: dict[str, Any] = {k: self.settings[k] for k in _GENERATION
                              if self.settings.get(k) is not None}
        if self.settings.get("json_schema"):
            kw["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "place", "schema": ANSWER_SCHEMA, "strict": True}}
        if self.settings.get("extra_body"):
            kw["extra_body"] = dict(self.settings["extra_body"])
        if request.audio_path is not None and self.name == "openai":
            kw["modalities"] = ["text"]
        if self.settings.get("modalities"):
            kw["modalities"] = list(self.settings["modalities"])
        if self.settings.get("stream"):
            kw.update(stream=True, stream_options={"include_usage": True})
        return {"model": self.model, "messages": messages, **kw}

    async def generate(self, request: Request) -> Reply:
        kw = await self.chat_request(request)
        try:
            resp = await self.get_client().chat.completions.create(**kw)
            if kw.get("stream"):
                resp = await gathered(resp)
        except openai.APIStatusError as exc:
            code = exc.status_code
            raise BackendError(f"{self.name} {code}: {error_message(exc)}",
                               retryable=retryable_status(code), gone=model_gone(exc),
                               retry_after=retry_after_s(exc.response.headers)) from None
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            bound = refusal(exc)  # a reply past a bound (size, HTML page, redirect)
            if bound is not None:
                raise BackendError(f"{self.name}: {bound}", retryable=bound.retryable) from None
            raise BackendError(f"{self.name} connection: {type(exc).__name__}: {exc}",
                               retryable=True) from None
        except Refused as exc:  # a reply past a bound, raised while its body streamed
            raise BackendError(f"{self.name}: {exc}", retryable=exc.retryable) from None
        except UnreadableReply as exc:  # from a replica pool (agl.backends.endpoints)
            raise BackendError(f"{self.name} reply unreadable: {exc}", retryable=True) from None
        except (json.JSONDecodeError, openai.APIResponseValidationError) as exc:
            # A 200 whose body is not JSON, or not a completion: the server's fault, like a 5xx.
            raise BackendError(f"{self.name} reply unreadable: {type(exc).__name__}: {exc}",
                               retryable=True) from None
        except (openai.OpenAIError, ValueError, TypeError) as exc:
            raise BackendError(f"{self.name} reply unreadable: {type(exc).__name__}: {exc}",
                               retryable=False) from None
        return to_reply(resp, self.name)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


class OpenAICompatible(OpenAIChat):
    name = "openai-compatible"  # its entry in the index (agl.backends)
    default_key_envs = ()
    key_required = False
    example_model = "Qwen/Qwen2-Audio-7B-Instruct"
    settings_rules: ClassVar[dict[str, str | None]] = {
        **OpenAIChat.settings_rules, "endpoint_concurrency": "count",
        "endpoint_backoff_s": "nonnegative", "endpoint_backoff_cap_s": "nonnegative"}

    def __init__(self, model: str = "", **settings: Any):
        if not settings.get("base_url") and not settings.get("base_url_env"):
            raise AglError("openai-compatible backend: set base_url (e.g. "
                           "http://host:8000/v1, or --base-url), or base_url_env")
        super().__init__(model, **settings)
        if settings.get("api_key_env") and not self._key:
            raise AglError(f"openai-compatible backend: environment variable "
                           f"{settings['api_key_env']} is not set")
        self._pool = None
        if isinstance(settings.get("base_url"), list):
            self._pool, self._client = pooled_client(settings, self._key or "EMPTY",
                                                     http_client=lambda: openai_http_client(self))

        self._text_tokens: dict[tuple[str | None, str], int | None] = {}
        self._tokenize_http = None

    def endpoint_report(self) -> list[dict[str, Any]] | None:
        """Per-endpoint requests, failures and latency when `base_url` lists replicas."""
        return self._pool.report() if self._pool is not None else None

    async def generate(self, request: Request) -> Reply:
        reply = await super().generate(request)
        if (request.audio_path is not None and self.settings.get("audio_tokens_per_s")
                and "audio_tokens" not in reply.extra and isinstance(reply.input_tokens, int)):
            text = await self.text_tokens(request)
            if text is not None and reply.input_tokens > text:
                from dataclasses import replace

                return replace(reply, extra={**reply.extra, "audio_tokens": reply.input_tokens - text,
                                             "audio_tokens_from": "tokenize"})
        return reply

    async def text_tokens(self, request: Request) -> int | None:
        """The prompt tokens of `request`'s messages without the audio, as the server counts
        them (vLLM's `POST /tokenize` at the server's root); None where it cannot say."""
        memo = (request.system, request.prompt)
        if memo not in self._text_tokens:
            self._text_tokens[memo] = await self._tokenize(request)
        return self._text_tokens[memo]

    async def _tokenize(self, request: Request) -> int | None:
        from dataclasses import replace

        base = self._base_url[0] if isinstance(self._base_url, list) else self._base_url
        root = urlsplit(str(base))
        path = root.path.rstrip("/").removesuffix("/v1")
        url = urlunsplit(root._replace(path=f"{path}/tokenize", fragment=""))
        body = await self.chat_request(replace(request, audio_path=None, parts=()))
        payload = {"model": body["model"], "messages": body["messages"], "add_generation_prompt": True}
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        if self._tokenize_http is None:
            self._tokenize_http = openai_http_client(self)
        try:
            resp = await self._tokenize_http.post(url, json=payload, headers=headers)
            count = resp.json().get("count") if resp.status_code == 200 else None
        except Exception:  # noqa: BLE001 - no /tokenize (not vLLM), or no JSON: not reported
            return None
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    async def aclose(self) -> None:
        if self._tokenize_http is not None:
            await self._tokenize_http.aclose()
            self._tokenize_http = None
        await super().aclose()


def base_url(settings: dict[str, Any], name: str) -> Any:
    """`base_url`, or the value of the variable `base_url_env` names (never both)."""
    env = settings.get("base_url_env")
    if not env:
        return settings.get("base_url")
    if settings.get("base_url"):
        raise AglError(f"{name} backend: set base_url or base_url_env, not both")
    url = os.environ.get(str(env), "").strip()
    if not url:
        raise AglError(f"{name} backend: environment variable {env} (base_url_env) is not set")
    return url


def client_url(url: str | None) -> dict[str, Any]:
    """AsyncOpenAI's base_url, with a query string moved to `default_query`: the SDK appends
    its paths to the URL's raw text, which would put them inside the query."""
    if not url or "?" not in url:
        return {"base_url": url}
    parts = urlsplit(url)
    return {"base_url": urlunsplit(parts._replace(query="", fragment="")),
            "default_query": dict(parse_qsl(parts.query, keep_blank_values=True))}


def error_message(exc: Any) -> str:
    """The service's own error message from an SDK exception (its body), else its text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(exc, "message", exc))


_GONE_CODES = ("model_not_found", "model_decommissioned", "model_deprecated")


def model_gone(exc: Any) -> bool:
    """Whether an API error says the model itself is gone: OpenAI's 404 `model_not_found`,
    a `model_decommissioned` / `model_deprecated` code, or an OpenAI-compatible server's 404
    naming the model (vLLM: "The model `x` does not exist.")."""
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    code = str(err.get("code") or "") if isinstance(err, dict) else ""
    if code in _GONE_CODES:
        return True
    msg = error_message(exc).lower()
    return getattr(exc, "status_code", None) == 404 and "model" in msg and (
        "not exist" in msg or "not found" in msg or "deprecated" in msg)


async def gathered(stream: Any) -> Any:
    """A streamed completion read whole, as the one completion it adds up to."""
    text, model, fingerprint, usage, finish = [], None, None, None, None
    async for chunk in stream:
        model = getattr(chunk, "model", None) or model
        fingerprint = getattr(chunk, "system_fingerprint", None) or fingerprint
        usage = getattr(chunk, "usage", None) or usage
        for c in chunk.choices or []:
            text.append(getattr(c.delta, "content", None) or "")
            finish = c.finish_reason or finish
    msg = NS(content="".join(text), refusal=None)
    return NS(choices=[NS(message=msg, finish_reason=finish)], usage=usage, model=model,
              system_fingerprint=fingerprint)


def served(resp: Any) -> dict[str, Any]:
    """What the provider says answered (volatile: see the module docstring)."""
    out = {"served_model": getattr(resp, "model", None),
           "system_fingerprint": getattr(resp, "system_fingerprint", None)}
    return {k: str(v) for k, v in out.items() if isinstance(v, str) and v}


def to_reply(resp: Any, name: str) -> Reply:
    """A chat completion as a Reply (the synchronous and the batch path read it alike)."""
    # A 200 whose body is not a completion (an HTML error page, a proxy's text) comes back
    # from the SDK as a string or a model without choices: a failure, never an answer.
    choices = getattr(resp, "choices", None)
    if not choices:
        raise BackendError(f"{name} reply unreadable: no choices in {str(resp)[:200]!r}",
                           retryable=True)
    choice = choices[0]
    usage = getattr(resp, "usage", None)
    tokens_in = getattr(usage, "prompt_tokens", None) if usage else None
    tokens_out = getattr(usage, "completion_tokens", None) if usage else None
    msg = choice.message
    extra = {"finish_reason": choice.finish_reason} if choice.finish_reason else {}
    details = getattr(usage, "completion_tokens_details", None) if usage else None
    thinking = getattr(details, "reasoning_tokens", None) if details else None
    if thinking:  # counted in completion_tokens, and against the output limit
        extra["thinking_tokens"] = thinking
    extra.update(served(resp))
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    audio = getattr(details, "audio_tokens", None) if details is not None else None
    if isinstance(audio, int) and not isinstance(audio, bool):  # what the server says it heard
        extra["audio_tokens"] = audio
    refusal = getattr(msg, "refusal", None)
    if refusal or (choice.finish_reason == "content_filter" and not msg.content):
        return Reply(ReplyStatus.REFUSED, text=refusal or "answer withheld: content_filter",
                     input_tokens=tokens_in, output_tokens=tokens_out, extra=extra)
    if choice.finish_reason in OUTPUT_LIMIT_REASONS:
        # Cut at the output limit: an answer of its own kind, with or without text; asking
        # again with the same limit would cut it again (and cost as much).
        return Reply(ReplyStatus.TRUNCATED, text=msg.content or "", input_tokens=tokens_in,
                     output_tokens=tokens_out, extra=extra)
    if not (msg.content or "").strip():
        # No text is no answer: retried, and never cached as an unparseable one.
        raise BackendError(f"{name} reply empty (content {msg.content!r}, finish_reason "
                           f"{choice.finish_reason!r}); not an answer", retryable=True)
    return Reply(ReplyStatus.OK, text=msg.content, input_tokens=tokens_in,
                 output_tokens=tokens_out, extra=extra)
