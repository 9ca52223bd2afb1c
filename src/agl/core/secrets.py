"""Every secret the run knows, and scrubbing it out of every text the project writes.

A key can come back from anywhere: a server that echoes it in an error body, in the reply
text a model writes, in a header that ends up in an exception message. So the rule is not
"redact error messages" but "no text leaves this process with a key in it": predictions,
cache entries, summaries, MLflow params/tags/artifacts and log lines all pass through
`scrub`.

The secrets are the values of environment variables whose names look like credentials
(`*_API_KEY`, `*_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, ...), plus any variable a
backend's settings name with `api_key_env`. Values shorter than 8 characters are left out:
they would also match ordinary words and numbers, and no real API key is that short.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8
_NAME = re.compile(r"(API_?KEY|_KEY$|TOKEN$|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


def known_secrets(settings: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> list[str]:
    """Secret values known to this process, longest first (so a key that contains another
    is replaced whole)."""
    env = os.environ if env is None else env
    names = {k for k in env if _NAME.search(k)}
    for k, v in (settings or {}).items():
        if k.endswith("_env") and isinstance(v, str):
            names.add(v)
    values = {env[n] for n in names if len(env.get(n) or "") >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def scrub_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with every known secret (or the given ones) replaced by a redaction marker."""
    for s in known_secrets() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


def scrub(value: Any, secrets: Iterable[str] | None = None) -> Any:
    """`value` with every known secret replaced by `[redacted]`, in strings at any depth
    (dict keys included); other values unchanged."""
    found = list(known_secrets() if secrets is None else secrets)
    if not found:
        return value

    def clean(v: Any) -> Any:
        if isinstance(v, str):
            return scrub_text(v, found)
        if isinstance(v, dict):
            return {clean(k): clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return type(v)(clean(x) for x in v)
        return v

    return clean(value)


def contains_secret(text: str | bytes, secrets: Iterable[str] | None = None) -> bool:
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return any(s.encode() in data for s in (known_secrets() if secrets is None else secrets))
