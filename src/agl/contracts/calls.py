"""One call to a model and its answer: `Request` in, `Reply` out.

Failures are statuses, never values: a call that failed is `Reply(status=FAILED, error=...)`,
never made-up text. Backends (agl.backends) answer these; the runner (agl.inference) retries,
caches and records them; judges and curation read them. `Attempt` is what the runner tells a
backend that queues about the attempt under way: its deadline and its count of requests sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Iterator
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
    # Which asking of the clip this is (params.yaml infer.repeats): 0 is the run itself;
    # each further repeat is its own cache entry and its own sampled draw.
    repeat: int = 0
    # Seconds (start, end) of the file this request hears (agl.inference.long_audio): the
    # runner cuts them into a WAV just before the call, so the backend sends that alone;
    # None: the whole file. `audio_sha256` is then the window's address, not the file's.
    window: tuple[float, float] | None = None
    # Several windows (start, end) of the file as audio parts of one prompt, in order
    # (long_audio mode multi_part; a backend with `multi_part` cuts them); () for none.
    parts: tuple[tuple[float, float], ...] = ()
    # Send the audio file as published, its container tags included (the `paper` protocol,
    # the `tags` intervention); False, the default: the audio frames alone
    # (agl.backends.base.sent_audio strips every tag, and no file name leaves the process).
    tags: bool = False


class ReplyStatus(StrEnum):
    """How a call ended: a reply (ok), a structured refusal by the service, or no reply at all
    (failed)."""
    OK = "ok"
    # The service declined in a structured way (a safety block, an API `refusal` field);
    # `text` holds its explanation. A refusal written in prose comes back OK and the parser
    # recognises it.
    REFUSED = "refused"
    FAILED = "failed"
    # The reply stopped at the output limit (`finish_reason: length`, Gemini `MAX_TOKENS`):
    # an answer cut short, text or none; never retried as a transport error is, and counted
    # apart from refusals and unparseable replies (thinking tokens count against the limit).
    TRUNCATED = "truncated"


# The stop reasons that mean the output limit cut the reply (OpenAI and OpenAI-compatible
# servers `length`, Gemini `MAX_TOKENS`, Anthropic-style `max_tokens`).
OUTPUT_LIMIT_REASONS = frozenset({"length", "MAX_TOKENS", "max_tokens"})


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


@dataclass
class Attempt:
    """One attempt of the runner at one request, as a backend that queues sees it (a replica
    pool, agl.backends.endpoints): the attempt's deadline, paused while the request waits in
    the queue (`queued`), and how many requests it sent (`sent`; None: the backend does not
    count, one call is one request). A wait behind another clip's 429 is then neither this
    clip's timeout nor one of its requests."""

    deadline: Any = None  # the runner's asyncio.Timeout
    sent: int | None = None

    @contextlib.contextmanager
    def queued(self) -> Iterator[None]:
        """No deadline while waiting for an endpoint; what was left of it once one is had."""
        timer = self.deadline
        if timer is None or timer.when() is None or timer.expired():
            yield
            return
        loop = asyncio.get_running_loop()
        left = timer.when() - loop.time()
        timer.reschedule(None)
        try:
            yield
        finally:
            if not timer.expired():
                timer.reschedule(loop.time() + left)

    def sending(self) -> None:
        """One request leaves for a server."""
        self.sent = (self.sent or 0) + 1


# The attempt under way in this task (the runner sets it around `Backend.generate`).
ATTEMPT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("agl_attempt", default=None)
