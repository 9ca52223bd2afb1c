"""The batch jobs of one run: a small JSON file beside the run, rewritten atomically.

`<run>/batch_state.json` holds everything a later pass (another day, another machine with
the run folder and the key) needs to pick up where the last one left off:

* `jobs`: the live jobs. Each has a local `tag` (sent to the provider as metadata or display
  name), the provider's `job_id`, the uploaded input file, when it was created and expires,
  whether it is the probe, and `clips`: sample id -> the cache key and audio hash of the
  request it carries (the custom id of a request is its sample id). A job whose `job_id` is
  still null was being created when the process died: the next pass looks it up by its tag
  (found: adopted; not found: never created, its clips go back to the queue), so a kill
  between "create" and "save" never submits a clip twice.
* `uploads`: Gemini audio already in the Files API (audio SHA-256 -> name, uri, expiry).
* `fallback`: sample id -> why its batch request did not answer (until the clip is answered).
* `attempts`: sample id -> batch jobs it has been in (for `fallback: batch`).
* `probe`: null, or {status: running | accepted | rejected, reason}.
* `rejected`: null, or why the provider does not take these requests in batch; later
  passes then run the clips synchronously, saying so.
* `history`: finished jobs (id, final state, counts), for `--batch-status`.

Reading it checks each field's type (a malformed file is one line, never a traceback later);
`agl.inference.batch.check` checks its jobs against the run before a pass acts on them.

Not a DVC output: it holds ids, times and run history. The file is written to a temporary
name, fsync'd and renamed, so a kill leaves the old or the new state, never half of one.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agl.core import diskwrite
from agl.core.secrets import scrub
from agl.errors import AglError
from agl.inference.batch.options import STATE_FILE

VERSION = 1


@dataclass
class Job:
    """One batch job in the run's state file: which clips it holds (by custom id), its provider ids
    and files, its run fingerprint."""
    tag: str
    provider: str
    clips: dict[str, dict[str, Any]]  # sample id (= custom id) -> {key, audio_sha256}
    created: float
    fingerprint: str = ""  # the run fingerprint its requests were built for
    job_id: str | None = None
    input_ref: str | None = None  # the uploaded request file (None: inline requests)
    expires_at: float | None = None
    probe: bool = False
    cancel_requested: bool = False
    provider_state: str | None = None
    last_poll: float | None = None
    result_failures: int = 0  # passes in a row that could not read this finished job's results


@dataclass
class BatchState:
    backend: str
    model: str
    fingerprint: str
    jobs: list[Job] = field(default_factory=list)
    uploads: dict[str, dict[str, Any]] = field(default_factory=dict)
    fallback: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    probe: dict[str, Any] | None = None
    rejected: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def in_flight(self) -> set[str]:
        """Sample ids held by a live job (one that may still answer, or bill)."""
        return {sid for job in self.jobs for sid in job.clips}

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["version"] = VERSION
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BatchState:
        d = dict(d)
        d.pop("version", None)
        d["jobs"] = [Job(**j) for j in d.get("jobs") or []]
        return cls(**d)


def state_path(out_dir: str | Path) -> Path:
    return Path(out_dir) / STATE_FILE


def load(out_dir: str | Path) -> BatchState | None:
    path = state_path(out_dir)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AglError(f"{path}: unreadable ({exc}); it lists this run's batch jobs: restore it "
                       "(or, if no job is live, delete it)") from None
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        raise AglError(f"{path}: not a batch state file of version {VERSION}")
    problem = _malformed(raw)
    if problem:
        raise AglError(f"{path}: {problem}; it lists this run's batch jobs: restore it (or, if "
                       "no job is live, delete it)")
    return BatchState.from_json(raw)


_NUM = (int, float)
_OPT_STR = (str, type(None))
_OPT_NUM = (int, float, type(None))
# Each field of a job and of the state: the types it may hold (bool is an int: checked apart).
_JOB_FIELDS = {"tag": str, "provider": str, "clips": dict, "created": _NUM, "fingerprint": str,
               "job_id": _OPT_STR, "input_ref": _OPT_STR, "expires_at": _OPT_NUM,
               "probe": bool, "cancel_requested": bool, "provider_state": _OPT_STR,
               "last_poll": _OPT_NUM, "result_failures": int}
_STATE_FIELDS = {"backend": str, "model": str, "fingerprint": str, "jobs": list,
                 "uploads": dict, "fallback": dict, "attempts": dict,
                 "probe": (dict, type(None)), "rejected": _OPT_STR, "history": list}
_REQUIRED_JOB = {"tag", "provider", "clips", "created"}


def _wrong(d: dict[str, Any], fields: dict[str, Any]) -> str | None:
    """The first field of `d` that is unknown or of the wrong type, described; None if none."""
    for k, v in d.items():
        if k not in fields:
            return f"unknown field '{k}'"
        want = fields[k]
        if isinstance(v, bool) and want is not bool and bool not in (
                want if isinstance(want, tuple) else (want,)):
            return f"field '{k}' is {v!r}"
        if not isinstance(v, want):
            return f"field '{k}' is {str(v)[:40]!r}"
    return None


def _malformed(raw: dict[str, Any]) -> str | None:
    """What is wrong with a state file's content, in a few words naming the job and field;
    None when each field has its type (what a pass relies on without checking again)."""
    top = {k: v for k, v in raw.items() if k != "version"}
    for k in ("backend", "model", "fingerprint"):
        if k not in top:
            return f"malformed (no '{k}')"
    wrong = _wrong(top, _STATE_FIELDS)
    if wrong:
        return f"malformed ({wrong})"
    for i, job in enumerate(top.get("jobs") or []):
        if not isinstance(job, dict):
            return f"malformed (job #{i + 1} is not a mapping)"
        name = job.get("job_id") or job.get("tag") or f"#{i + 1}"
        wrong = _wrong(job, _JOB_FIELDS) or next(
            (f"no field '{k}'" for k in sorted(_REQUIRED_JOB) if k not in job), None)
        if wrong:
            return f"malformed (job {name}: {wrong})"
        for sid, info in job["clips"].items():
            if not sid or not isinstance(info, dict) or not all(
                    isinstance(info.get(k), _OPT_STR) for k in ("key", "audio_sha256")):
                return f"malformed (job {name}: clip {sid!r} is {str(info)[:60]!r})"
    for name in ("fallback", "attempts"):
        for sid, v in top.get(name, {}).items():
            if not isinstance(v, str if name == "fallback" else int) or isinstance(v, bool):
                return f"malformed ({name}: clip {sid!r} is {str(v)[:40]!r})"
    return None


def save(out_dir: str | Path, state: BatchState) -> None:
    path = state_path(out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    # no key, ever
    diskwrite.write_text(path, json.dumps(scrub(state.to_json()), indent=1, sort_keys=True) + "\n")
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def new_tag() -> str:
    """A job's local name, unique across runs and machines: `agl-<time>-<random>`."""
    return f"agl-{int(time.time())}-{os.urandom(6).hex()}"


def refuse_while_live(out_dir: str | Path) -> None:
    """Refuse a synchronous run while batch jobs of the run are live: their clips would be
    paid twice (an AglError saying how to collect or cancel them)."""
    state = load(out_dir)
    if state is None or not state.jobs:
        return
    n = sum(len(j.clips) for j in state.jobs)
    raise AglError(f"{state_path(out_dir)}: {len(state.jobs)} batch job(s) holding "
                   f"{n} clip(s) are live; a synchronous run would pay for them twice. Rerun "
                   "with --batch (settings.mode: batch) to collect them, or cancel them first "
                   "(agl infer ... --batch-cancel)")
