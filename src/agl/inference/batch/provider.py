"""What a provider's batch API must do for a pass (`agl.inference.batch.run`), whatever its shape.

A provider is one small class in `agl.inference.batch.providers.<name>`, with an entry under
its backend's name in that package's index. It wraps the backend's own SDK client and builds each
request with the backend's own code, so a batch request is the synchronous request.

The pass calls, in this order:
  prepare(requests)          upload what the requests need by reference (Gemini: audio)
  line(request)              the request as one JSONL line (its size decides the split)
  upload_input(chunk)        the request file, if the API takes a file (its id), else None
  create(chunk, ref, tag)    the job (tag: the local name, findable with `find`)
  status(job)                the job's state; terminal or not
  results(job, status)       Results: {custom id: Reply, or the error text of a failed
                             request}, and the entries it could not use (counted by why)
  cancel(job), cleanup(job, status)  cancel; delete what a finished job no longer needs
"""

from __future__ import annotations

import abc
import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agl.backends.base import Backend, BackendError
from agl.contracts.calls import Reply, Request
from agl.inference.batch.options import BatchOptions
from agl.inference.batch.state import BatchState, Job


@dataclass
class Chunk:
    """The requests of one job-to-be, written as JSONL to `path` as they are built."""

    path: Path
    sample_ids: list[str] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class Created:
    """A job the provider accepted: its id and when it expires."""
    job_id: str
    expires_at: float | None = None


@dataclass
class JobStatus:
    """A job's state as the provider reports it, normalised to an outcome once terminal."""
    state: str  # the provider's own word (in_progress, JOB_STATE_RUNNING, ...)
    # completed | failed | expired | cancelled once terminal, None while it may still run.
    outcome: str | None
    error: str | None = None  # why a job failed as a whole
    counts: dict[str, int] = field(default_factory=dict)  # total / completed / failed if known
    expires_at: float | None = None
    raw: Any = None  # the provider's job object, for `results`


@dataclass
class Results:
    """A finished job's result entries by custom id. An entry that names no clip (not a
    mapping, no or a non-string id, unreadable) is counted in `ignored` by why, never
    raised; an id answered twice with two different replies is in `conflicts` (neither
    is trusted: the clip is asked again). A reply wins over an error for the same id."""

    by_id: dict[str, Reply | str] = field(default_factory=dict)
    ignored: Counter = field(default_factory=Counter)  # why -> how many entries
    conflicts: set[str] = field(default_factory=set)

    def add(self, cid: Any, value: Reply | str) -> None:
        if not isinstance(cid, str) or not cid:
            self.ignore("no clip id" if cid is None or cid == "" else "a non-string clip id")
            return
        old = self.by_id.get(cid)
        if old is None:
            self.by_id[cid] = value
            return
        self.ignore(f"clip '{cid}' twice")
        if isinstance(old, Reply) and isinstance(value, Reply) and old != value:
            self.conflicts.add(cid)
        elif isinstance(value, Reply) and not isinstance(old, Reply):
            self.by_id[cid] = value

    def ignore(self, why: str) -> None:
        self.ignored[why] += 1


class SubmitError(Exception):
    """A job was not created. `rejected`: the provider refused the requests themselves
    (a 4xx on create): batch is not for this model. Otherwise transient: try again later.
    `ambiguous`: the create call may have reached the provider (a timeout, a dropped
    connection): the job's record stays, and the next pass looks it up by its tag."""

    def __init__(self, message: str, *, rejected: bool = False, ambiguous: bool = False):
        super().__init__(message)
        self.rejected = rejected
        self.ambiguous = ambiguous


# How long one request file may take to upload, or one result file to download: a 200 MB
# file on a slow uplink (the call's own timeout_s counts when longer).
TRANSFER_TIMEOUT_S = 900.0


class BatchProvider(abc.ABC):
    """One provider's batch API (OpenAI, Gemini): build and upload a job's requests, create, poll,
    cancel, and read results by custom id. The result-file loop is written once (`results`,
    as inspect_ai's FileBatcher): a provider fills `result_files`, `download` and
    `result_line`."""
    name: ClassVar[str] = ""

    def __init__(self, backend: Backend, options: BatchOptions, state: BatchState, *,
                 timeout_s: float, concurrency: int):
        self.backend = backend
        self.options = options
        self.state = state
        self.timeout_s = timeout_s
        self.concurrency = concurrency

    async def prepare(self, requests: list[Request], save) -> dict[str, str]:
        """Upload what the requests reference; {sample id: error} for those that cannot go
        (they run synchronously, where the same error is recorded). `save()` persists the
        state (uploads) as it grows. Default: nothing to upload."""
        return {}

    @abc.abstractmethod
    async def line(self, request: Request) -> bytes:
        """The request as one line of the provider's JSONL request file (no newline)."""

    @abc.abstractmethod
    async def upload_input(self, chunk: Chunk) -> str | None:
        """Upload the chunk's request file; its id, or None where the requests go inline."""

    @abc.abstractmethod
    async def create(self, chunk: Chunk, input_ref: str | None, tag: str) -> Created:
        """Create the job; raises SubmitError."""

    @abc.abstractmethod
    async def find(self, job: Job) -> str | None:
        """The id of the job created with `job.tag`, if the provider has it."""

    @abc.abstractmethod
    async def status(self, job: Job) -> JobStatus: ...

    async def results(self, job: Job, status: JobStatus) -> Results:
        """A finished job's results: each of its result files downloaded and read line by line
        (a line that is not a JSON mapping names no clip: counted, and its clip falls back)."""
        out = Results()
        for ref in self.result_files(status):
            async with asyncio.timeout(max(self.timeout_s, TRANSFER_TIMEOUT_S)):
                data = await self.download(ref)
            self.read_result_file(data, out)
        return out

    def read_result_file(self, data: bytes, out: Results) -> None:
        """The lines of one result file into `out` (the loop both providers share)."""
        for raw in data.splitlines():
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                out.ignore("not JSON")  # a torn line names no clip; its clip falls back
                continue
            if not isinstance(entry, dict):
                out.ignore("not a mapping")
                continue
            read = self.result_line(entry)
            if read is not None:
                out.add(*read)

    def result_files(self, status: JobStatus) -> list[str]:
        """Hook: the ids of a finished job's result files, answers first (a reply wins over
        an error for the same clip); default none."""
        return []

    async def download(self, ref: str) -> bytes:
        """Hook: one result file's bytes (called only for what `result_files` names)."""
        raise NotImplementedError(f"{type(self).__name__} names result files but cannot download them")

    def result_line(self, entry: dict[str, Any]) -> tuple[Any, Reply | str] | None:
        """Hook: one result line's (custom id, reply or why it failed); None: a line to skip."""
        raise NotImplementedError(f"{type(self).__name__} names result files but cannot read their lines")

    @abc.abstractmethod
    async def cancel(self, job: Job) -> None: ...

    async def cleanup(self, job: Job, status: JobStatus | None) -> None:
        """Delete the files a finished job no longer needs; best effort."""
        return None

    async def aclose(self) -> None:
        await self.backend.aclose()


def reply_or_error(convert, payload: Any) -> Reply | str:
    """A provider's result converted with the backend's own reply reader; a result that
    reader refuses (no candidates, no choices, not a completion) is a failed request."""
    try:
        return convert(payload)
    except BackendError as exc:
        return str(exc)
    except Exception as exc:  # a malformed result costs its clip a fallback, not the pass
        return f"unreadable result ({type(exc).__name__}: {str(exc)[:200]})"
