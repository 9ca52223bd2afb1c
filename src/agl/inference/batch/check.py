"""What a pass trusts of the state file and of a job's results (see docs/batch.md, "A state
file or a result it cannot trust").

* `check_jobs`: before a pass collects or submits anything, the live jobs of the run's
  fingerprint must hold clips of the run, each in one job, each with the audio it was
  submitted with. A clip renamed in the file would otherwise be submitted again under its
  real name while the job still holds (and bills) it under the wrong one; the pass refuses
  in one line instead, and so does every pass until the file is put right: nothing is
  submitted, nothing paid twice.
* `usable`: a finished job's result entries that answer one of its clips once; the others
  (no clip id, an id the job does not hold, one clip with two different replies) are
  counted in one line, and the job's clips without a usable answer fall back like any clip
  a job did not answer.
"""

from __future__ import annotations

from pathlib import Path

from agl.contracts.calls import Reply, Request
from agl.errors import AglError
from agl.inference.batch.provider import Results
from agl.inference.batch.state import BatchState, Job

_FIX = ("it was edited, or belongs to another run or manifest: restore it; or cancel its jobs "
        "(agl infer ... --batch-cancel) and delete it (what the jobs answered is then asked "
        "again)")


def check_jobs(path: Path, state: BatchState, fingerprint: str, requests: list[Request],
               finished: frozenset[str]) -> None:
    """Refuse (AglError, one line naming the file, the job and the clip) a state whose live
    jobs of this fingerprint hold a clip the run does not have, one clip twice, or a clip
    under another clip's name (its recorded audio is another clip's of the run). A job of
    another fingerprint (an earlier prompt) is only cached, never recorded: not checked."""
    plan = {r.sample_id: r for r in requests}
    by_audio: dict[str, set[str]] = {}
    for r in requests:
        if r.audio_sha256:
            by_audio.setdefault(r.audio_sha256, set()).add(r.sample_id)
    held: dict[str, tuple[str, dict]] = {}  # sample id -> (its job, what the job recorded)
    for job in state.jobs:
        if job.fingerprint != fingerprint:
            continue
        name = job.job_id or job.tag
        for sid, info in job.clips.items():
            if sid in held:
                raise AglError(f"{path}: clip '{sid}' is held by two jobs ({held[sid][0]} and "
                               f"{name}); {_FIX}")
            held[sid] = name, info
    for sid, (name, info) in held.items():
        sha, r = info.get("audio_sha256"), plan.get(sid)
        if r is None and sid not in finished:
            raise AglError(f"{path}: job {name} holds clip '{sid}', which is not a clip of "
                           f"this run; {_FIX}")
        if not sha or (r is not None and sha == r.audio_sha256):
            continue
        # Recorded audio that is not the clip's own: renamed if it is the audio of a pending
        # clip no job holds (that one would be submitted again). A clip already recorded (a
        # pass killed before its job left the file) is judged by that test alone.
        others = by_audio.get(sha, set()) - {sid}
        if (others and r is not None and r.audio_sha256) or (others - set(held)):
            raise AglError(f"{path}: job {name} holds clip '{sid}' with the audio of clip "
                           f"'{min(others)}' (renamed?); {_FIX}")


def usable(job: Job, results: Results) -> tuple[dict[str, Reply | str], str | None]:
    """The job's results for its own clips, each answered once; and the one line saying
    which entries were ignored and why (None: none were)."""
    ignored = dict(results.ignored)
    out: dict[str, Reply | str] = {}
    for cid, value in results.by_id.items():
        if cid not in job.clips:
            why = f"unknown clip '{cid}'"
            ignored[why] = ignored.get(why, 0) + 1
        elif cid not in results.conflicts:
            out[cid] = value
    if not ignored:
        return out, None
    n = sum(ignored.values())
    whys = sorted(ignored.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {why}" for why, k in whys[:5])
    more = f", {len(whys) - 5} other reason(s)" if len(whys) > 5 else ""
    lost = sum(1 for sid in job.clips if sid not in out)
    return out, (f"job {job.job_id}: {n} result entr{'y' if n == 1 else 'ies'} ignored "
                 f"({shown}{more}); its {lost} clip(s) without a usable answer are asked again")
