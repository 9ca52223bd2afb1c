"""What the HTTP backends share: which failures are worth retrying, Retry-After, API keys,
and the bounded transport their SDK clients read replies through."""

from __future__ import annotations

import datetime
import email.utils
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from agl.errors import AglError
from agl.http import client as http

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def retryable_status(code: int | None) -> bool:
    """Whether an HTTP status is worth retrying (429, 408, 409, 425, 529 and any 5xx)."""
    return code is not None and (code in RETRYABLE_STATUS or code >= 500)


def retry_after_s(headers: Mapping[str, str] | None, details: Any = None) -> float | None:
    """Seconds to wait as the server asked: `Retry-After` (seconds or HTTP date),
    `retry-after-ms`, or Google's RetryInfo `retryDelay: "12s"` in the error details."""
    if headers:
        h = {k.lower(): v for k, v in headers.items()}
        if "retry-after-ms" in h:
            try:
                return max(0.0, float(h["retry-after-ms"]) / 1000)
            except ValueError:
                pass
        if "retry-after" in h:
            value = h["retry-after"].strip()
            try:
                return max(0.0, float(value))
            except ValueError:
                try:  # an HTTP date; anything else ("soon") is no instruction: the backoff
                    parsed = email.utils.parsedate_to_datetime(value) if value else None
                except (TypeError, ValueError, IndexError, OverflowError):
                    parsed = None
                if parsed is not None:
                    if parsed.tzinfo is None:  # RFC 9110 dates are GMT
                        parsed = parsed.replace(tzinfo=datetime.UTC)
                    return max(0.0, parsed.timestamp() - time.time())
    m = re.search(r"retryDelay['\"]?\s*[:=]\s*['\"]?(\d+(?:\.\d+)?)s", str(details or ""))
    return float(m.group(1)) if m else None


class UnreadableReply(Exception):
    """A success status whose body is not an answer (not JSON, not a completion): the
    server's fault, retried (and a replica answering so is backed off) like a 5xx."""


def client_args(backend: Any, flavour: str = "httpx") -> dict[str, Any]:
    """Keyword arguments for the `httpx.AsyncClient` under a backend's SDK client: every
    reply is capped at `backend.max_reply_bytes` after decoding (a batch job's status and
    result files at `backend.max_batch_bytes`), an HTML page with a success status is
    refused, redirects stay on the host (`agl.http.client`). The whole call's deadline is
    the runner's `timeout_s`. `flavour`: the SDK's httpx family (`agl.http.client.flavour_of`)."""
    def cap(request) -> tuple[int, str]:
        path = request.url.path
        if "/batches" in path or "/files" in path:  # the providers' batch and file APIs
            return int(backend.max_batch_bytes), "infer.max_batch_bytes"
        return int(backend.max_reply_bytes), "infer.max_reply_bytes / --max-reply-bytes"

    limits = http.Limits(deadline_s=None, max_bytes=None, param="infer")
    return http.async_client_args(limits, refuse_html=True, cap_for=cap, flavour=flavour)


def openai_http_client(backend: Any) -> Any:
    """The openai SDK's own async httpx client class, bounded (`client_args`)."""
    from openai import DefaultAsyncHttpxClient

    return DefaultAsyncHttpxClient(**client_args(backend, http.flavour_of(DefaultAsyncHttpxClient)))


def refusal(exc: BaseException) -> Any:
    """The bound's refusal (`agl.http.client.Refused`) behind an SDK's connection error, if any."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, http.Refused):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def api_key(settings: Mapping[str, Any], default_envs: tuple[str, ...], backend: str,
            required: bool = True) -> str | None:
    """The key from the environment variable named by `api_key_env`, else the defaults.
    Keys are never read from settings themselves (those are logged and hashed)."""
    envs = (settings["api_key_env"],) if settings.get("api_key_env") else default_envs
    for name in envs:
        value = os.environ.get(name)
        if value:
            return value
    if required:
        raise AglError(f"{backend} backend: no API key; set the environment variable "
                       f"{' or '.join(envs)}")
    return None


def is_deterministic(settings: Mapping[str, Any]) -> bool:
    """Greedy decoding (temperature 0) counts as deterministic unless `cache` says otherwise;
    only such replies are cached."""
    if "cache" in settings:
        return bool(settings["cache"])
    t = settings.get("temperature")
    return t is not None and float(t) == 0.0
