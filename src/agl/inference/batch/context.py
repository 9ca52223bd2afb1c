"""What one pass carries (`PassContext`) and what it reports (`PassReport`): the clips left for
the synchronous path, their reasons, and what it collected, submitted and left out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl.backends.base import Backend
from agl.contracts.calls import Request
from agl.inference.batch.options import BatchOptions


@dataclass
class PassContext:
    backend: Backend  # the run's backend: names the records, holds the settings
    out_dir: Path
    cache: Any  # agl.inference.cache.ResponseCache | None
    fingerprint: str
    options: BatchOptions
    timeout_s: float
    concurrency: int
    finished: frozenset[str] = frozenset()  # clips the run folder holds a finished record for


@dataclass
class PassReport:
    sync_now: list[Request] = field(default_factory=list)  # for the synchronous path now
    reasons: dict[str, str] = field(default_factory=dict)  # sample id -> why synchronous
    collected: int = 0
    submitted_jobs: int = 0
    submitted_clips: int = 0
    in_flight_jobs: int = 0
    in_flight_clips: int = 0
    waiting: int = 0  # neither answered, submitted nor synchronous: the next pass takes them
    messages: list[str] = field(default_factory=list)


def to_sync(report: PassReport, request: Request, reason: str | None) -> None:
    report.sync_now.append(request)
    if reason:
        report.reasons[request.sample_id] = reason


async def quiet(coro) -> None:
    try:
        await coro
    except Exception:  # noqa: BLE001 - clean-up is best effort
        pass


def short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"
