"""One clip from the Internet Archive: fetched into its `.part`, resumed, and verified.

`transfer` makes one attempt at the rest of a clip's file (an HTTP Range request from the
bytes already in `<target>.part`; a server that ignores Range sends the whole file and the
part restarts). `ArchiveMetadata` reads what the Archive publishes for an item (size, MD5,
SHA-1 per file) once per item and run; `archive_mismatch`, `verify_part` and
`duration_problem` say why a file cannot be accepted. The run over a whole manifest (jobs,
lock file, budget, summary) is `agl.dataset.download`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from agl.core import audio
from agl.core.nofollow import check_regular, open_part
from agl.dataset.checksums import Entry, file_digest
from agl.dataset.fetch import (
    FinalError,
    Policy,
    RetryableError,
    get_json,
    raise_for_status,
    refused,
    transport_error,
)
from agl.dataset.manifest import Clip
from agl.http.client import Refused, is_html_type, looks_like_html, with_cap

if TYPE_CHECKING:
    import httpx


class CorruptError(Exception):
    """A file that differs from what lock.json recorded."""


def clip_url(base_url: str, clip: Clip) -> str:
    """Where the Archive serves a clip: `<base_url>/<key>/<mp3name>`, both parts quoted."""
    return f"{base_url.rstrip('/')}/{quote(clip.key, safe='')}/{quote(clip.mp3name, safe='')}"


def part_path(target: Path) -> Path:
    """The partial download beside `target` (renamed to it once complete and verified)."""
    return target.with_name(target.name + ".part")


def transfer(clip: Clip, target: Path, policy: Policy, client: httpx.Client,
             stop: threading.Event, archive: ArchiveFile | None) -> int:
    """One attempt: fetch the rest of the file into the .part; returns bytes received."""
    part = part_path(target)
    part.parent.mkdir(parents=True, exist_ok=True)
    # a link, folder or FIFO planted at the part is refused (one line), never read or written through
    st = check_regular(part, "the partial download", f"remove it (rm {part}) and run again")
    have = st.st_size if st is not None else 0
    if have and archive is not None and archive.size == have:
        received, total = 0, have  # complete, killed before its rename: verify, not refetch
    else:
        received, total = _fetch_rest(clip, part, have, policy, client, stop,
                                      clip_cap(archive, policy))
    size = part.stat().st_size
    if total is not None and size < total:
        raise RetryableError(f"incomplete: {size} of {total} bytes")  # resumes from the part
    if archive is not None:
        problem = archive_mismatch(part, archive)
        if problem:
            part.unlink()  # damaged in transit, or a stale part: fetch it whole again
            raise RetryableError(f"downloaded file {problem}")
    return received


def clip_cap(archive: ArchiveFile | None, policy: Policy) -> int:
    """The most bytes a clip's file may have: the Archive's listed size, else the policy's
    `max_clip_bytes` (an endless or bombing body stops there, on disk and in memory)."""
    if archive is not None and archive.size is not None:
        return archive.size
    return policy.max_clip_bytes


def _fetch_rest(clip, part: Path, have: int, policy, client, stop,
                cap: int) -> tuple[int, int | None]:
    """GET from byte `have` on (Range), appending to the part; (bytes received, file size).
    The part never grows past `cap`; a reply that would make it is refused and the part
    removed; so is an HTML page served as the file."""
    import httpx  # imported where used: only the commands that fetch pay its import time

    # identity: a Range names bytes of the file, not of a compressed rendering of it
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
    received = 0
    try:
        with client.stream("GET", clip_url(policy.base_url, clip), headers=headers,
                           extensions=with_cap(cap, _cap_name(policy))) as resp:
            if resp.status_code == 416 and have:
                if _range_total(resp) == have:
                    return 0, have  # nothing after our last byte: the part is the whole file
                part.unlink()  # our part is not a prefix the server recognises: start over
                raise RetryableError("HTTP 416 on resume; restarting the file", wait=0.0)
            raise_for_status(resp)
            if is_html_type(resp.headers.get("content-type")):
                raise RetryableError(f"an HTML page with status {resp.status_code}, not the "
                                     "audio (an error page served as a success)")
            if have and resp.status_code == 206 and _range_start(resp) == have:
                mode, start, total = "ab", have, _range_total(resp)
            else:  # no Range support (200): the whole file again
                mode, start, total = "wb", 0, _int(resp.headers.get("Content-Length"))
            # unbuffered: a kill keeps every byte received; never through a link (agl.core.nofollow)
            with open_part(part, append=mode == "ab", buffering=0) as fh:
                for chunk in resp.iter_bytes():  # as received: a cut keeps every byte
                    if stop.is_set():
                        raise FinalError("interrupted; rerun to resume from the .part file")
                    if start + received + len(chunk) > cap:
                        part.unlink()  # not the file: nothing of it is kept
                        raise _too_large(cap, policy)
                    if not start and not received and looks_like_html(chunk):
                        part.unlink()
                        raise RetryableError("an HTML page, not the audio (an error page "
                                             "served as a success)")
                    fh.write(chunk)
                    received += len(chunk)
                os.fsync(fh.fileno())
    except Refused as exc:
        part.unlink(missing_ok=True)  # what came before the refusal is not the file
        raise refused(exc) from None
    except httpx.HTTPError as exc:
        raise transport_error(exc) from None
    return received, total


def _too_large(cap: int, policy: Policy) -> FinalError:
    return FinalError(f"the server sent more than {cap:,} bytes ({_cap_name(policy)}); "
                      "refused, nothing kept")


def _cap_name(policy: Policy) -> str:
    flag = "--max-clip-bytes" if policy.param == "--" else f"{policy.param}.max_clip_bytes"
    return f"the Archive's listed size, else {flag}"



def verify_part(target: Path, expected: Entry | None,
                archive: ArchiveFile | None) -> tuple[Entry, bool]:
    """The finished part's lock entry, and whether the Archive vouched for it; raises
    `CorruptError` when it differs from the lock's `expected` entry."""
    part = part_path(target)
    entry = file_digest(part)
    if expected is not None and entry != expected:
        raise CorruptError(
            f"downloaded {entry.size} bytes, sha256 {entry.sha256[:12]}... but lock.json "
            f"records {expected.size} bytes, sha256 {expected.sha256[:12]}... (the source "
            f"changed; kept as {part.name})"
        )
    return entry, archive is not None


def archive_mismatch(path: Path, archive: ArchiveFile) -> str | None:
    """How the file differs from the Archive's size, MD5 and SHA-1, or None."""
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


def duration_problem(path: Path, clip: Clip, tolerance: float | None) -> str | None:
    """Why a file's decoded audio is unusable for this clip (does not decode, or shorter
    than the manifest says beyond `tolerance`), or None."""
    if tolerance is None:
        return None
    got = audio.probe(path)
    if not got.ok:
        return got.reason
    problem = audio.duration_problem(got.seconds or 0.0, clip.seconds, tolerance)
    return problem[1] if problem else None


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
class ArchiveFile:
    """What the Archive's metadata says one file must be."""

    size: int | None
    md5: str | None
    sha1: str | None


class ArchiveMetadata:
    """Per-item metadata (`<metadata_url>/<key>`), fetched at most once per item and run."""

    def __init__(self, client: httpx.Client, policy: Policy, stop: threading.Event):
        self.client, self.policy, self.stop = client, policy, stop
        self._items: dict[str, dict[str, ArchiveFile] | None] = {}
        self._guard = threading.Lock()

    def lookup(self, clip: Clip) -> ArchiveFile | None:
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

    def _fetch(self, key: str) -> dict[str, ArchiveFile] | None:
        url = f"{self.policy.metadata_url.rstrip('/')}/{quote(key, safe='')}"
        try:
            doc = get_json(self.client, url, self.policy, self.stop)
        except (FinalError, RetryableError):
            return None  # no checksums to check against: size and SHA-256 still go to the lock
        files = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(files, list):
            return None
        out = {}
        for f in files:
            if isinstance(f, dict) and isinstance(f.get("name"), str):
                out[f["name"]] = ArchiveFile(
                    size=_int(f.get("size")), md5=f.get("md5"), sha1=f.get("sha1")
                )
        return out
