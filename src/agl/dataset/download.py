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
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from agl import __version__
from agl.dataset.checksums import Entry, file_digest, merge_lock, read_lock
from agl.dataset.manifest import Clip, is_plain_name
from agl.errors import AglError

if TYPE_CHECKING:
    import httpx

USER_AGENT = (
    f"agl/{__version__} (AGL1K audio geo-localization benchmark downloader; "
    "polite: parallel jobs are a parameter, retries back off and honour Retry-After)"
)
ARCHIVE_DOWNLOAD_URL = "https://archive.org/download"
ARCHIVE_METADATA_URL = "https://archive.org/metadata"
RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Policy:
    """How hard and how politely to try. `sleep` and `rng` are injectable for tests."""

    base_url: str = ARCHIVE_DOWNLOAD_URL
    metadata_url: str | None = ARCHIVE_METADATA_URL  # None: do not check Archive checksums
    jobs: int = 4
    timeout_s: float = 60.0
    retries: int = 5  # attempts after the first, per request
    backoff_s: float = 1.0  # first wait; doubles each retry, with +-50% jitter
    max_backoff_s: float = 120.0  # also caps a server's Retry-After
    failure_budget: int = 0  # clips allowed to fail before the run fails
    # A new file must decode to at least (1 - tolerance) x the manifest's mp3seconds: a cut
    # transfer that the server reported as whole, or a short file the Archive serves, is
    # caught even where no checksum is listed. None: no duration check.
    duration_tolerance: float | None = 0.1
    user_agent: str = USER_AGENT
    progress: bool = True
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)


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
    results: tuple[ClipResult, ...]

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def failed(self) -> tuple[ClipResult, ...]:
        return tuple(r for r in self.results if r.status in ("failed", "corrupt"))

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.results)

    def as_dict(self) -> dict[str, object]:
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


class _Retryable(Exception):
    """A failure worth another attempt (after `wait` seconds if the server said so)."""

    def __init__(self, reason: str, wait: float | None = None):
        super().__init__(reason)
        self.wait = wait


class _Final(Exception):
    """A failure another attempt will not fix (404, other 4xx, lock mismatch)."""


def clip_url(base_url: str, clip: Clip) -> str:
    return f"{base_url.rstrip('/')}/{quote(clip.key, safe='')}/{quote(clip.mp3name, safe='')}"


def check_clips(clips: Iterable[Clip], audio_root: Path) -> list[Clip]:
    """Refuse any clip whose key or mp3name is not a plain name, before anything else."""
    root = audio_root.resolve()
    checked = []
    for i, clip in enumerate(clips, start=1):
        for name, value in (("key", clip.key), ("mp3name", clip.mp3name)):
            if not is_plain_name(value) or value != value.strip():
                raise AglError(
                    f"clip {i} ({clip.key!r}): {name} {value!r} is not a plain file name; "
                    "fix the manifest (no '/', '\\' or '..')"
                )
        if not (root / clip.key / clip.mp3name).resolve().is_relative_to(root):
            raise AglError(f"clip {i} ({clip.key!r}): resolves outside {audio_root}; fix it")
        checked.append(clip)
    return checked


def make_client(policy: Policy) -> httpx.Client:
    import httpx

    return httpx.Client(
        headers={"User-Agent": policy.user_agent},
        timeout=httpx.Timeout(policy.timeout_s),
        follow_redirects=True,  # archive.org/download redirects to the storage node
        limits=httpx.Limits(max_connections=max(policy.jobs, 1) + 2),
    )


def download_clips(
    clips: Iterable[Clip],
    out: str | Path,
    policy: Policy = Policy(),
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
    own_client = client is None
    client = client or make_client(policy)
    stop = threading.Event()
    metadata = _ArchiveMetadata(client, policy, stop)
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
        sent = _with_retries(
            lambda: _transfer(clip, target, policy, client, stop, archive), policy, stop
        )
        entry, verified = _verify_part(clip, target, expected, archive)
        short = _duration_problem(_part(target), clip, policy.duration_tolerance)
        if short:
            _part(target).unlink()  # whole as served, yet short: a resume would not help
            return ClipResult(clip.relpath, "failed", reason=f"truncated download: {short}")
    except _Final as exc:
        return ClipResult(clip.relpath, "failed", reason=str(exc))
    except _Retryable as exc:
        return ClipResult(clip.relpath, "failed", reason=f"gave up: {exc}")
    except _Corrupt as exc:
        return ClipResult(clip.relpath, "corrupt", reason=str(exc))
    except OSError as exc:  # the local side (disk full, permissions): reported, not a traceback
        return ClipResult(clip.relpath, "failed", reason=f"cannot write {target}: {exc}")
    os.replace(_part(target), target)
    return ClipResult(clip.relpath, "downloaded", sent, entry=entry, archive_verified=verified,
                      unverified=not verified)


class _Corrupt(Exception):
    """A file that differs from what lock.json recorded."""


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
    except (_Final, _Retryable):
        archive = None
    if archive is not None:
        problem = _archive_mismatch(target, archive)
        if problem:
            return ClipResult(clip.relpath, "corrupt", reason=f"present file {problem}")
    short = _duration_problem(target, clip, tolerance)
    if short:  # left untouched for the user to inspect, never recorded in the lock
        return ClipResult(clip.relpath, "corrupt", reason=f"present file {short}")
    return ClipResult(clip.relpath, "present", entry=entry, archive_verified=archive is not None,
                      unverified=archive is None)


def _duration_problem(path: Path, clip: Clip, tolerance: float | None) -> str | None:
    """Why a file's decoded audio is unusable for this clip (does not decode, or shorter
    than the manifest says beyond `tolerance`), or None."""
    if tolerance is None:
        return None
    from agl.core.audio import duration_problem, probe

    got = probe(path)
    if not got.ok:
        return got.reason
    problem = duration_problem(got.seconds or 0.0, clip.seconds, tolerance)
    return problem[1] if problem else None


def _part(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def _transfer(clip, target, policy, client, stop, archive) -> int:
    """One attempt: fetch the rest of the file into the .part; returns bytes received."""
    part = _part(target)
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if have and archive is not None and archive.size == have:
        received, total = 0, have  # complete, killed before its rename: verify, not refetch
    else:
        received, total = _fetch_rest(clip, part, have, policy, client, stop)
    size = part.stat().st_size
    if total is not None and size < total:
        raise _Retryable(f"incomplete: {size} of {total} bytes")  # resumes from the part
    if archive is not None:
        problem = _archive_mismatch(part, archive)
        if problem:
            part.unlink()  # damaged in transit, or a stale part: fetch it whole again
            raise _Retryable(f"downloaded file {problem}")
    return received


def _fetch_rest(clip, part: Path, have: int, policy, client, stop) -> tuple[int, int | None]:
    """GET from byte `have` on (Range), appending to the part; (bytes received, file size)."""
    import httpx

    headers = {"Range": f"bytes={have}-"} if have else {}
    received = 0
    try:
        with client.stream("GET", clip_url(policy.base_url, clip), headers=headers) as resp:
            if resp.status_code == 416 and have:
                if _range_total(resp) == have:
                    return 0, have  # nothing after our last byte: the part is the whole file
                part.unlink()  # our part is not a prefix the server recognises: start over
                raise _Retryable("HTTP 416 on resume; restarting the file", wait=0.0)
            _raise_for_status(resp)
            if have and resp.status_code == 206 and _range_start(resp) == have:
                mode, total = "ab", _range_total(resp)
            else:  # no Range support (200): the whole file again
                mode, total = "wb", _int(resp.headers.get("Content-Length"))
            with open(part, mode, buffering=0) as fh:  # a kill keeps every byte received
                for chunk in resp.iter_bytes():  # as received: a cut keeps every byte
                    if stop.is_set():
                        raise _Final("interrupted; rerun to resume from the .part file")
                    fh.write(chunk)
                    received += len(chunk)
                os.fsync(fh.fileno())
    except httpx.TimeoutException as exc:
        raise _Retryable(f"timeout ({type(exc).__name__})") from None
    except httpx.TransportError as exc:
        raise _Retryable(f"connection error ({type(exc).__name__}: {exc})") from None
    return received, total


def _verify_part(clip, target, expected, archive) -> tuple[Entry, bool]:
    part = _part(target)
    entry = file_digest(part)
    if expected is not None and entry != expected:
        raise _Corrupt(
            f"downloaded {entry.size} bytes, sha256 {entry.sha256[:12]}... but lock.json "
            f"records {expected.size} bytes, sha256 {expected.sha256[:12]}... (the source "
            f"changed; kept as {part.name})"
        )
    return entry, archive is not None


def _archive_mismatch(path: Path, archive: _ArchiveFile) -> str | None:
    md5, sha1 = hashlib.md5(), hashlib.sha1()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            md5.update(block)
            sha1.update(block)
            size += len(block)
    if archive.size is not None and size != archive.size:
        return f"has {size} bytes but the Archive lists {archive.size}"
    if archive.md5 and md5.hexdigest() != archive.md5:
        return f"has md5 {md5.hexdigest()} but the Archive lists {archive.md5}"
    if archive.sha1 and sha1.hexdigest() != archive.sha1:
        return f"has sha1 {sha1.hexdigest()} but the Archive lists {archive.sha1}"
    return None


def _with_retries(attempt: Callable[[], int], policy: Policy, stop: threading.Event) -> int:
    for n in range(policy.retries + 1):
        try:
            return attempt()
        except _Retryable as exc:
            if n == policy.retries or stop.is_set():
                raise
            backoff = min(policy.max_backoff_s, policy.backoff_s * 2**n)
            wait = backoff * policy.rng.uniform(0.5, 1.5)
            if exc.wait is not None:
                wait = min(policy.max_backoff_s, max(exc.wait, 0.0))  # the server's word
            policy.sleep(wait)
    raise AssertionError("unreachable")


def _raise_for_status(resp: httpx.Response) -> None:
    code = resp.status_code
    if code < 400:
        return
    if code in RETRYABLE or code >= 500:
        raise _Retryable(f"HTTP {code}", wait=retry_after_s(resp.headers.get("Retry-After")))
    if code in (404, 410):
        raise _Final(f"not found (HTTP {code}) at {resp.request.url}")
    raise _Final(f"HTTP {code} at {resp.request.url}")


def retry_after_s(value: str | None) -> float | None:
    """`Retry-After` as seconds: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def _range_start(resp: httpx.Response) -> int | None:
    value = resp.headers.get("Content-Range", "")  # "bytes 100-199/200"
    try:
        return int(value.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None


def _range_total(resp: httpx.Response) -> int | None:
    return _int(resp.headers.get("Content-Range", "").rpartition("/")[2])


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class _ArchiveFile:
    """What the Archive's metadata says one file must be."""

    size: int | None
    md5: str | None
    sha1: str | None


class _ArchiveMetadata:
    """Per-item metadata (`<metadata_url>/<key>`), fetched at most once per item and run."""

    def __init__(self, client: httpx.Client, policy: Policy, stop: threading.Event):
        self.client, self.policy, self.stop = client, policy, stop
        self._items: dict[str, dict[str, _ArchiveFile] | None] = {}
        self._guard = threading.Lock()

    def lookup(self, clip: Clip) -> _ArchiveFile | None:
        """The file's published checksums, or None where the Archive publishes none."""
        if self.policy.metadata_url is None:
            return None
        with self._guard:
            known = clip.key in self._items
        if not known:
            files = self._fetch(clip.key)
            with self._guard:
                self._items[clip.key] = files
        files = self._items[clip.key]
        return None if files is None else files.get(clip.mp3name)

    def _fetch(self, key: str) -> dict[str, _ArchiveFile] | None:
        url = f"{self.policy.metadata_url.rstrip('/')}/{quote(key, safe='')}"
        try:
            doc = get_json(self.client, url, self.policy, self.stop)
        except (_Final, _Retryable):
            return None  # no checksums to check against: size and SHA-256 still go to the lock
        files = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(files, list):
            return None
        out = {}
        for f in files:
            if isinstance(f, dict) and isinstance(f.get("name"), str):
                out[f["name"]] = _ArchiveFile(
                    size=_int(f.get("size")), md5=f.get("md5"), sha1=f.get("sha1")
                )
        return out


def get_bytes(client: httpx.Client, url: str, policy: Policy, stop=None) -> bytes:
    """A small document (a manifest, a metadata record), with the same retry rules."""
    import httpx

    stop = stop or threading.Event()

    def attempt() -> bytes:
        try:
            resp = client.get(url)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timeout ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"connection error ({type(exc).__name__})") from None
        _raise_for_status(resp)
        return resp.content

    box: list[bytes] = []
    _with_retries(lambda: box.append(attempt()) or 0, policy, stop)
    return box[0]


def get_json(client: httpx.Client, url: str, policy: Policy, stop=None) -> object:
    import json

    try:
        return json.loads(get_bytes(client, url, policy, stop))
    except ValueError:
        raise _Final(f"{url}: not JSON") from None


def fetch_document(url: str, policy: Policy, client: httpx.Client | None = None) -> bytes:
    """A small document by URL, raising AglError with the reason when it cannot be had."""
    own = client is None
    client = client or make_client(policy)
    try:
        return get_bytes(client, url, policy)
    except (_Final, _Retryable) as exc:
        raise AglError(f"{url}: {exc}; check the URL and your connection, then rerun") from None
    finally:
        if own:
            client.close()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
