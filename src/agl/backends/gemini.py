"""`gemini`: Google's Gemini models through the google-genai SDK, natively.

Audio goes inline (base64 in the request) up to `upload_above_bytes` (default 15 MB, under
the API's 20 MB request limit) and through the Files API above it (uploaded, polled until
ACTIVE, deleted after the call). Settings:

  temperature, top_p, top_k, max_output_tokens, seed   generation (temperature 0: cached)
  thinking_budget, thinking_level, include_thoughts    thinking (2.5 / 3 models)
  json_schema: true       constrain the reply to `agl.prompts.ANSWER_SCHEMA`
  base_url, api_version   another endpoint (a proxy, or the tests' fake server)
  api_key_env             the environment variable with the key (default GEMINI_API_KEY,
                          then GOOGLE_API_KEY); keys are never settings

The SDK's own retries stay off (one attempt): the runner retries, with jitter and the
server's Retry-After, and counts the attempts. Replies are read through a bounded httpx
transport (`agl.backends.service.client_args`: a size cap after decoding, no HTML error pages,
redirects on the host); a reply that is not JSON, or has no text and no block reason, is a
failure to retry, never an answer to cache.
"""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any, ClassVar

import httpx
from google import genai
from google.genai import errors, types

from agl.backends.base import (
    SERVICE_SETTINGS,
    Backend,
    BackendError,
    opaque_name,
    part_audio,
    sent_audio_async,
)
from agl.backends.service import (
    api_key,
    client_args,
    is_deterministic,
    refusal,
    retry_after_s,
    retryable_status,
)
from agl.contracts.calls import OUTPUT_LIMIT_REASONS, Reply, ReplyStatus, Request
from agl.core.audio import mime_type
from agl.core.checks import number_setting
from agl.prompts import ANSWER_SCHEMA

_GENERATION = ("temperature", "top_p", "top_k", "max_output_tokens", "seed")
# Finish reasons that mean the service withheld the answer rather than failed to give one.
_BLOCKED = {"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION",
            "IMAGE_SAFETY", "LANGUAGE"}


class Gemini(Backend):
    name = "gemini"  # its entry in the index (agl.backends)
    over_http = True
    default_key_envs: tuple[str, ...] = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    key_required = True
    probe_first = True
    multi_part = True  # long_audio multi_part: the windows as several audio parts
    audio_tokens_per_s = 32.0  # Gemini's documented rate: 32 tokens per second of audio
    example_model = "gemini-2.5-flash"
    settings_rules: ClassVar[dict[str, str | None]] = {
        **SERVICE_SETTINGS, "api_version": None, "upload_above_bytes": "count0",
        "temperature": "nonnegative", "top_p": "share_closed", "top_k": "count",
        "max_output_tokens": "count", "seed": "integer", "thinking_budget": "integer",
        "thinking_level": None, "include_thoughts": "bool"}

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        self.deterministic = is_deterministic(settings)
        self.upload_above = int(number_setting(settings, "upload_above_bytes", 15_000_000, "count0",
                                               "gemini setting"))
        self._key = api_key(settings, self.default_key_envs, "gemini")
        self.require_model()  # after the key: without one, the key is what to set first
        self._client = None

    def get_client(self):
        """The SDK client, made on first use (with the reply caps; the batch provider shares it)."""
        if self._client is None:
            http = types.HttpOptions(
                base_url=self.settings.get("base_url"),
                api_version=self.settings.get("api_version"),
                retry_options=types.HttpRetryOptions(attempts=1),
                async_client_args=client_args(self),  # httpx, bounded (not aiohttp)
            )
            self._client = genai.Client(api_key=self._key, http_options=http)
        return self._client

    def generation_config(self, request: Request):
        """The generation config a request is sent with (a batch request carries the same)."""
        s = self.settings
        kw: dict[str, Any] = {k: s[k] for k in _GENERATION if s.get(k) is not None}
        thinking = {k: s[k] for k in ("thinking_budget", "thinking_level", "include_thoughts")
                    if s.get(k) is not None}
        if thinking:
            kw["thinking_config"] = types.ThinkingConfig(**thinking)
        if s.get("json_schema"):
            kw["response_mime_type"] = "application/json"
            kw["response_json_schema"] = ANSWER_SCHEMA
        if request.system:
            kw["system_instruction"] = request.system
        return types.GenerateContentConfig(**kw)

    async def _audio_part(self, request: Request):
        mime = mime_type(request.audio_path)
        data = await sent_audio_async(request)  # no tags, unless the protocol sends them
        return await self._part(data, mime, request, inline=len(data) <= self.upload_above)

    async def _audio_parts(self, request: Request) -> tuple[list[Any], list[str]]:
        """A multi_part request's windows as audio parts in time order (WAV): inline while
        the request stays under `upload_above_bytes`, through the Files API past it."""
        parts, uploaded, size = [], [], 0
        for data in await part_audio(request):
            size += len(data)
            part, name = await self._part(data, "audio/wav", request, inline=size <= self.upload_above)
            parts.append(part)
            if name:
                uploaded.append(name)
        return parts, uploaded

    async def _part(self, data: bytes, mime: str, request: Request, *, inline: bool):
        if inline:
            return types.Part.from_bytes(data=data, mime_type=mime), None
        client = self.get_client()
        # The bytes, not the path: given a path the SDK sends its base name
        # (X-Goog-Upload-File-Name), and a file name can hold the city.
        f = await client.aio.files.upload(file=io.BytesIO(data), config={
            "mime_type": mime, "display_name": opaque_name(data)})
        for _ in range(120):  # audio is usually ACTIVE within seconds
            if f.state is None or f.state.name != "PROCESSING":
                break
            await asyncio.sleep(1)
            f = await client.aio.files.get(name=f.name)
        if f.state is not None and f.state.name == "FAILED":
            raise BackendError(f"file upload of clip {request.sample_id} failed on the server",
                               retryable=True)
        return types.Part.from_uri(file_uri=f.uri, mime_type=f.mime_type or mime), f.name

    async def generate(self, request: Request) -> Reply:
        client = self.get_client()
        uploaded: list[str] = []
        try:
            contents: list[Any] = []
            if request.audio_path is not None and request.parts:
                parts, uploaded = await self._audio_parts(request)
                contents.extend(parts)
            elif request.audio_path is not None:
                part, name = await self._audio_part(request)
                contents.append(part)
                uploaded = [name] if name else []
            contents.append(request.prompt)
            resp = await client.aio.models.generate_content(
                model=self.model, contents=contents, config=self.generation_config(request))
        except errors.APIError as exc:
            headers = getattr(getattr(exc, "response", None), "headers", None)
            code = exc.code if isinstance(exc.code, int) else None
            retryable = retryable_status(code) or exc.status in ("RESOURCE_EXHAUSTED",
                                                                  "UNAVAILABLE")
            raise BackendError(f"gemini {code} {exc.status}: {exc.message}",
                               retryable=retryable, gone=model_gone(code, exc.status, exc.message),
                               retry_after=retry_after_s(headers, exc.details)) from None
        except (TimeoutError, OSError) as exc:
            raise BackendError(f"gemini connection: {type(exc).__name__}: {exc}",
                               retryable=True) from None
        except Exception as exc:
            bound = refusal(exc)  # a reply past a bound (size, HTML page, redirect)
            if bound is not None:
                raise BackendError(f"gemini: {bound}", retryable=bound.retryable) from None
            if _is_transport_error(exc):
                raise BackendError(f"gemini connection: {type(exc).__name__}: {exc}",
                                   retryable=True) from None
            # A body the SDK could not read (not JSON, wrong shape): a failure, not an
            # answer; retried like a 5xx when it is not JSON at all.
            raise BackendError(f"gemini reply unreadable: {type(exc).__name__}: {exc}",
                               retryable=isinstance(exc, ValueError)) from None
        finally:
            for name in uploaded:
                try:
                    await client.aio.files.delete(name=name)
                except Exception:  # noqa: BLE001 - the file expires on its own in 48 h
                    pass
        return to_reply(resp)

    async def aclose(self) -> None:
        if self._client is not None:
            try:
                await self._client.aio.aclose()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            self._client = None


def model_gone(code: int | None, status: str | None, message: str | None) -> bool:
    """Whether a Gemini API error says the model is gone: NOT_FOUND for the model ("models/x
    is not found for API version v1beta"), or a message calling it deprecated / discontinued
    / no longer available."""
    msg = (message or "").lower()
    if (code == 404 or status == "NOT_FOUND") and "model" in msg:
        return True
    # The model itself retired, not a parameter of the call deprecated for it.
    return re.search(r"\bmodel\b[^.;]*\b(is|has been|was) (deprecated|discontinued|retired|"
                     r"shut down)|\bmodel\b[^.;]*\bno longer (available|supported)|"
                     # "Gemini 1.0 Pro Vision has been deprecated on ... switch to a
                     # different model": Google's wording for a retired model
                     r"(has been|was) (deprecated|discontinued|retired|shut down)\b.*\bmodel\b",
                     msg) is not None


def _is_transport_error(exc: Exception) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    try:
        import aiohttp  # optional: google-genai's other transport, absent where not installed

        return isinstance(exc, aiohttp.ClientConnectionError)
    except ImportError:  # pragma: no cover
        return False


def audio_tokens(usage: Any) -> int | None:
    """The prompt's AUDIO tokens in Gemini's usage (`prompt_tokens_details`, one count per
    modality); None where it gives none."""
    for detail in (getattr(usage, "prompt_tokens_details", None) if usage else None) or []:
        modality = getattr(detail, "modality", None)
        if str(getattr(modality, "name", modality)).upper() == "AUDIO" and detail.token_count is not None:
            return int(detail.token_count)
    return None


def to_reply(resp: Any) -> Reply:
    """A Gemini response as a Reply (the synchronous and the batch path read it alike)."""
    usage = resp.usage_metadata
    tokens_in = getattr(usage, "prompt_token_count", None) if usage else None
    out = getattr(usage, "candidates_token_count", None) if usage else None
    thoughts = getattr(usage, "thoughts_token_count", None) if usage else None
    tokens_out = None if out is None and thoughts is None else (out or 0) + (thoughts or 0)
    extra: dict[str, Any] = {}
    if thoughts:
        extra["thinking_tokens"] = thoughts
    audio = audio_tokens(usage)
    if audio is not None:  # the seconds Gemini says it heard (agl.inference.record)
        extra["audio_tokens"] = audio
    # What answered (volatile: kept out of the cache key and the tracked record).
    version = getattr(resp, "model_version", None)
    if isinstance(version, str) and version:
        extra["served_model"] = version
    feedback = getattr(resp, "prompt_feedback", None)
    if feedback is not None and getattr(feedback, "block_reason", None):
        reason = str(getattr(feedback.block_reason, "name", feedback.block_reason))
        return Reply(ReplyStatus.REFUSED, text=f"prompt blocked: {reason}",
                     input_tokens=tokens_in, output_tokens=tokens_out, extra=extra)
    if not resp.candidates:
        raise BackendError("gemini reply has no candidates", retryable=True)
    cand = resp.candidates[0]
    parts = (cand.content.parts if cand.content and cand.content.parts else None) or []
    text = "".join(p.text for p in parts if p.text and not p.thought)
    finish = getattr(cand.finish_reason, "name", None) if cand.finish_reason else None
    if finish:
        extra["finish_reason"] = finish
    if not text and finish in _BLOCKED:
        return Reply(ReplyStatus.REFUSED, text=f"answer withheld: {finish}",
                     input_tokens=tokens_in, output_tokens=tokens_out, extra=extra)
    if finish in OUTPUT_LIMIT_REASONS:
        # Cut at max_output_tokens, thinking included (googleapis/python-genai#2062): an
        # answer cut short, with or without text, never retried as a transport error is.
        return Reply(ReplyStatus.TRUNCATED, text=text, input_tokens=tokens_in,
                     output_tokens=tokens_out, extra=extra)
    if not text.strip():  # no text is no answer: retried, never cached as unparseable
        raise BackendError(f"gemini reply empty (finish_reason {finish}); not an answer",
                           retryable=True)
    return Reply(ReplyStatus.OK, text=text, input_tokens=tokens_in, output_tokens=tokens_out,
                 extra=extra)
