"""One call to a model and its answer: `Request` in, `Reply` out.

Failures are statuses, never values: a call that failed is `Reply(status=FAILED, error=...)`,
never made-up text. Backends (agl.backends) answer these; the runner (agl.inference) retries,
caches and records them; judges and curation read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Request:
    """One call: a prompt, optionally with a clip's audio (judges send text only)."""

    sample_id: str
    prompt: str
    audio_path: Path | None = None
    audio_sha256: str | None = None
    system: str | None = None


class ReplyStatus(StrEnum):
    """How a call ended: a reply (ok), a structured refusal by the service, or no reply at all
    (failed)."""
    OK = "ok"
    # The service declined in a structured way (a safety block, an API `refusal` field);
    # `text` holds its explanation. A refusal written in prose comes back OK and the parser
    # recognises it.
    REFUSED = "refused"
    FAILED = "failed"


@dataclass(frozen=True)
class Reply:
    """What a backend answers for one request: a status, the reply text or the error, tokens and
    latency; `extra` carries backend-specific fields (timings, attempts, a served prediction)."""
    status: ReplyStatus
    text: str | None = None
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_s: float | None = None
    # Local models: load/prefill/decode timings and tokens per second.
    extra: dict[str, Any] = field(default_factory=dict)
