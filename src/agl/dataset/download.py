"""Fetch a manifest's clips from the Internet Archive into the dataset folder, verifiably.

Each clip lives at `<base_url>/<key>/<mp3name>` (the Archive's layout) and lands at
`<out>/audio/<key>/<mp3name>`. The rules, in the order a clip meets them:

- Safe: `key` and `mp3name` must be plain names (no separators, no `..`) before any path is
  built or any request is sent; the whole manifest is checked before the first request.
- Never twice: a file that is already there is verified against `lock.json` (size and
  SHA-256) and never requested again; a mismatch is an error naming the clip, and the file is
  left as it is for the user to inspect, never silently overwritten.
- Resumable: bytes go to `<target>.part` beside the target; an interrupted transfer resumes
  with an HTTP Range request (a server that ignores Range sends the whole file, and the part
  is restarted); the part is renamed only once complete and verified.
- Verified: where the Archive's per-item metadata (`<metadata_url>/<key>`) lists the file,
  its size, MD5 and SHA-1 must match; in every case size and SHA-256 go to the lock file.
- Polite and robust: a User-Agent naming the project; retries with exponential backoff and
  jitter on 429, 5xx, timeouts and dropped connections, honouring `Retry-After`; a 404 or any
  other 4xx is final for that clip. The run fails only past `failure_budget` failed clips, and
  the summary names every missing one.

This module runs a manifest (jobs, the lock file, the failure budget, the summary); one clip's
transfer and checks are `agl.dataset.clip_fetch`, the HTTP rules `agl.dataset.fetch`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agl.core.paths import inside, is_plain_name
from agl.core.reach import Reach, archive_or_server
from agl.dataset.checksums import Entry, file_digest, merge_lock, read_lock
from agl.dataset.clip_fetch import (
    ArchiveMetadata,
    CorruptError,
    archive_mismatch,
    duration_problem,
    part_path,
    transfer,
    verify_part,
)
from agl.dataset.fetch import FinalError, Policy, RetryableError, make_client, with_retries
from agl.dataset.manifest import Clip
from agl.errors import AglError

if TYPE_CHECKING:
    import httpx

_DEFAULT_POLICY = Policy()  # one shared default, as a default argument value would be


@dataclass(frozen=True)
class ClipResult:
    """What happened to one clip: status is downloaded | present | failed | corrupt."""

    relpath: str
    status: str
    bytes: int = 0  # bytes transferred in this run
    reason: str | None = None
    entry: Entry | None = None
    archive_verified: bool = False
    # A file newly accepted (downloaded, or present but not in the lock) with no Archive
    # checksum to compare: only its size, SHA-256 and decoded duration vouch for it.
    unverified: bool = False


@dataclass(frozen=True)
class Summary:
    """Every clip's result, in manifest order: counts, the missing clips, the summary line."""

    results: tuple[ClipResult, ...]

    def count(self, status: str) -> int:
        """How many clips ended with `status`."""
        return sum(r.status == status for r in self.results)

    @property
    def failed(self) -> tuple[ClipResult, ...]:
        """The clips that failed or differ from the lock."""
        return tuple(r for r in self.results if r.status in ("failed", "corrupt"))

    @property
    def bytes(self) -> int:
        """Bytes transferred in this run."""
        return sum(r.bytes for r in self.results)

    def as_dict(self) -> dict[str, object]:
        """The counts and every missing clip with its reason (the stage's summary file)."""
        return {
            "clips": len(self.results),
            "downloaded": self.count("downloaded"),
            "present": self.count("present"),
            "failed": self.count("failed"),
            "corrupt": self.count("corrupt"),
            "archive_verified": sum(r.archive_verified for r in self.results),
            "unverified": sum(r.unverified for r in self.results),
            "bytes_downloaded": self.bytes,
            "missing": {r.relpath: r.reason for r in self.failed},
        }

    def check(self, failure_budget: int, lock_path: Path) -> None:
        """Raise AglError on any clip that differs from the lock, or past the budget."""
        corrupt = [r for r in self.results if r.status == "corrupt"]
        if corrupt:
            raise AglError(
                f"{len(corrupt)} clip(s) differ from {lock_path}: "
                + "; ".join(f"{r.relpath}: {r.reason}" for r in corrupt[:5])
                + ("; ..." if len(corrupt) > 5 else "")
                + " (left untouched: delete a file to fetch it again, or `dvc checkout data.dvc`)"
            )
        failed = self.failed
        if len(failed) > failure_budget:
            raise AglError(
                f"{len(failed)} clip(s) failed, more than failure_budget={failure_budget}: "
                + "; ".join(f"{r.relpath}: {r.reason}" for r in failed[:10])
                + ("; ..." if len(failed) > 10 else "")
                + ". Rerun to resume, or raise download.failure_budget"
            )

    def line(self) -> str:
        """One line for the terminal, with a warning for files no Archive checksum vouched for."""
        d = self.as_dict()
        text = (
            f"{d['downloaded']} downloaded, {d['present']} already present, "
            f"{d['failed']} failed, {d['corrupt']} corrupt; {_mb(self.bytes)} transferred; "
            f"{d['archive_verified']} verified against Archive checksums"
        )
        if d["unverified"]:
            text += (f"; WARNING: {d['unverified']} new file(s) NOT verified against Archive "
                     "checksums (none listed or metadata unavailable): only their decoded "
                     "duration was checked")
        return text



def check_clips(clips: Iterable[Clip], audio_root: Path) -> list[Clip]:
    """Refuse any clip whose key or mp3name is not a plain name, before anything else."""
    checked = []
    for i, clip in enumerate(clips, start=1):
        for name, value in (("key", clip.key), ("mp3name", clip.mp3name)):
            if not is_plain_name(value) or value != value.strip():
                raise AglError(
                    f"clip {i} ({clip.key!r}): {name} {value!r} is not a plain file name; "
                    "fix the manifest (no '/', '\\' or '..')"
                )
        inside(audio_root, audio_root / clip.key / clip.mp3name)  # no link may lead out
        checked.append(clip)
    return checked


def download_clips(
    clips: Iterable[Clip],
    out: str | Path,
    policy: Policy = _DEFAULT_POLICY,
    client: httpx.Client | None = None,
    check: bool = True,
) -> Summary:
    """Bring every clip of the manifest into `<out>/audio`, verified and recorded in lock.json.

    With `check`, raises AglError past the failure budget, and on any file that differs from
    the lock (whatever the budget), naming the clips (else call `Summary.check` later); the
    lock keeps every verified entry either way.
    """
    out = Path(out)
    audio_root = out / "audio"
    clips = check_clips(clips, audio_root)  # all of them, before the first request
    lock_path = out / "lock.json"
    lock = read_lock(lock_path)
    # One count for the whole run, shared by its threads: offline, the run stops in one line
    # after `offline_after` failures to connect (agl.core.reach), not after hours of retries.
    if policy.reach is None:  # `agl download` made one already: its manifest's fetch counts too
        policy = replace(policy, reach=Reach(archive_or_server, policy.offline_after,
                                             "download.offline_after"))
    own_client = client is None
    client = client or make_client(policy)
    stop = threading.Event()
    metadata = ArchiveMetadata(client, policy, stop)
    results: list[ClipResult] = []
    try:
        results = _run(clips, audio_root, lock, policy, client, metadata, stop, lock_path)
    finally:
        if own_client:
            client.close()
    summary = Summary(tuple(results))
    if check:
        summary.check(policy.failure_budget, lock_path)
    return summary


def _run(clips, audio_root, lock, policy, client, metadata, stop, lock_path) -> list[ClipResult]:
    from tqdm import tqdm

    results: list[ClipResult] = []
    bar = tqdm(
        total=len(clips), unit="clip", file=sys.stderr, disable=not policy.progress,
        desc="download", dynamic_ncols=True,
    )  # fmt: skip
    transferred = 0
    pool = ThreadPoolExecutor(max_workers=max(1, policy.jobs))
    try:
        jobs = {
            pool.submit(
                _one, clip, audio_root, lock.get(clip.relpath), policy, client, metadata, stop
            ): clip
            for clip in clips
        }
        for done, job in enumerate(as_completed(jobs), start=1):
            result = job.result()
            results.append(result)
            if result.entry is not None and result.status in ("downloaded", "present"):
                lock[result.relpath] = result.entry
            transferred += result.bytes
            bar.set_postfix_str(f"{_mb(transferred)}, {len(_failed(results))} failed")
            bar.update()
            if done % 50 == 0:
                merge_lock(lock_path, lock)  # a crash loses at most a little hashing work
    finally:
        stop.set()  # on Ctrl-C, running transfers stop at their next chunk and keep .part
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        merge_lock(lock_path, lock)
    order = {clip.relpath: i for i, clip in enumerate(clips)}
    return sorted(results, key=lambda r: order[r.relpath])


def _failed(results: list[ClipResult]) -> list[ClipResult]:
    return [r for r in results if r.status in ("failed", "corrupt")]


def _one(clip, audio_root, expected, policy, client, metadata, stop) -> ClipResult:
    target = audio_root / clip.key / clip.mp3name
    if target.exists():
        try:
            return _present(clip, target, expected, metadata, policy.duration_tolerance)
        except OSError as exc:
            return ClipResult(clip.relpath, "failed", reason=f"cannot read {target}: {exc}")
    try:
        archive = metadata.lookup(clip)
        sent = with_retries(
            lambda: transfer(clip, target, policy, client, stop, archive), policy, stop
        )
        entry, verified = verify_part(target, expected, archive)
        short = duration_problem(part_path(target), clip, policy.duration_tolerance)
        if short:
            part_path(target).unlink()  # whole as served, yet short: a resume would not help
            return ClipResult(clip.relpath, "failed", reason=f"truncated download: {short}")
    except FinalError as exc:
        return ClipResult(clip.relpath, "failed", reason=str(exc))
    except RetryableError as exc:
        return ClipResult(clip.relpath, "failed", reason=f"gave up: {exc}")
    except CorruptError as exc:
        return ClipResult(clip.relpath, "corrupt", reason=str(exc))
    except OSError as exc:  # the local side (disk full, permissions): reported, not a traceback
        return ClipResult(clip.relpath, "failed", reason=f"cannot write {target}: {exc}")
    os.replace(part_path(target), target)
    return ClipResult(clip.relpath, "downloaded", sent, entry=entry, archive_verified=verified,
                      unverified=not verified)


def _present(clip, target, expected, metadata, tolerance: float | None = 0.1) -> ClipResult:
    """A file already there: check it against the lock, or record it if the lock lacks it."""
    entry = file_digest(target)
    if expected is not None:
        if entry != expected:
            return ClipResult(
                clip.relpath, "corrupt",
                reason=f"{entry.size} bytes, sha256 {entry.sha256[:12]}... but lock.json "
                f"records {expected.size} bytes, sha256 {expected.sha256[:12]}...",
            )  # fmt: skip
        return ClipResult(clip.relpath, "present", entry=entry)
    # Not in the lock (a lost lock file, or audio copied in): trust it only if the Archive
    # agrees where it can say, then record it, so the next run checks against the lock.
    try:
        archive = metadata.lookup(clip)
    except (FinalError, RetryableError):
        archive = None
    if archive is not None:
        problem = archive_mismatch(target, archive)
        if problem:
            return ClipResult(clip.relpath, "corrupt", reason=f"present file {problem}")
    short = duration_problem(target, clip, tolerance)
    if short:  # left untouched for the user to inspect, never recorded in the lock
        return ClipResult(clip.relpath, "corrupt", reason=f"present file {short}")
    return ClipResult(clip.relpath, "present", entry=entry, archive_verified=archive is not None,
                      unverified=archive is None)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
