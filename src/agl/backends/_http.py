"""What the HTTP backends share: which failures are worth retrying, Retry-After, API keys."""

from __future__ import annotations

import email.utils
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from agl.errors import AglError

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def retryable_status(code: int | None) -> bool:
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
                parsed = email.utils.parsedate_to_datetime(value) if value else None
                if parsed is not None:
                    return max(0.0, parsed.timestamp() - time.time())
    m = re.search(r"retryDelay['\"]?\s*[:=]\s*['\"]?(\d+(?:\.\d+)?)s", str(details or ""))
    return float(m.group(1)) if m else None


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
