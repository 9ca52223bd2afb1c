"""What the run driver hands an executor (`Work`), what comes back (`Answer`), and how
(`Sink`): the records of the seam in `agl.inference.executors`, plain data that can travel
to another process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agl.contracts.calls import Reply, Request
from agl.contracts.models import ModelSpec
from agl.inference.runner import RunOptions


@dataclass(frozen=True)
class Work:
    """What an executor is given: plain data, so it can travel to another process."""

    requests: tuple[Request, ...]  # the pending requests, audio hashed (the cache key's)
    spec: ModelSpec  # which backend and model, with its settings
    options: RunOptions  # the cache folder, concurrency, timeout, retries, reply caps
    out_dir: Path  # the run folder (batch mode keeps its jobs' state file beside the run)
    fingerprint: str  # what makes this run's records interchangeable (run_fingerprint)
    # Sample ids the run folder already holds a finished record for (a batch job collected
    # now does not answer them again).
    finished: frozenset[str] = frozenset()
    clips: tuple[Any, ...] = ()  # the whole manifest: what `Backend.prepare` is given
    audio_root: Path | None = None


@dataclass(frozen=True)
class Answer:
    """One request answered. `price_factor`: this reply's price relative to the model entry's
    (a batch reply: the batch discount); `requested_now`: whether this run made (or read
    from the cache) the reply, rather than collecting a batch job an earlier run submitted."""

    request: Request
    reply: Reply
    price_factor: float = 1.0
    requested_now: bool = True


class Sink(Protocol):
    """Where an executor hands its answers: the driver, which makes them records."""

    async def put(self, answer: Answer) -> None:
        """Take one answer; it is written with the next group commit (returns at once)."""

    async def flush(self) -> None:
        """Return once every answer put so far is durable (fsync'd)."""
