"""The dataset lock file: size and SHA-256 of every clip, written once and verified ever after.

`data/lock.json` maps each clip's relative path (`<key>/<mp3name>`, the Internet Archive's
layout) to its size and SHA-256. The download stage writes an entry only after a file is
complete and verified; every later run re-checks present files against it, so a corrupted
or replaced file is an error naming the clip, never a silent overwrite.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from agl.core import diskwrite
from agl.errors import AglError

LOCK_VERSION = 1


@dataclass(frozen=True)
class Entry:
    """What a complete clip file must be."""

    size: int
    sha256: str


def file_digest(path: Path) -> Entry:
    """Size and SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return Entry(size=size, sha256=h.hexdigest())


def read_lock(path: Path) -> dict[str, Entry]:
    """The lock file's entries; an absent file is an empty lock."""
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        files = doc["files"]
        return {
            rel: Entry(size=int(e["size"]), sha256=str(e["sha256"])) for rel, e in files.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AglError(
            f"{path}: not a valid lock file ({exc!r}); restore it with `dvc checkout data.dvc` "
            "or delete it to re-verify every clip from the source"
        ) from None


def read_source(path: Path) -> dict[str, object] | None:
    """Where the dataset's manifest came from (URL or path, and its SHA-256), if recorded."""
    if not path.exists():
        return None
    try:
        source = json.loads(path.read_text(encoding="utf-8")).get("source")
    except (ValueError, AttributeError):
        return None
    return source if isinstance(source, dict) else None


def write_lock(
    path: Path, entries: dict[str, Entry], source: dict[str, object] | None = None
) -> None:
    """Write atomically (temp file + rename), sorted, so the bytes depend only on the entries.

    `source` says where the manifest came from; None keeps what the file already records.
    An unchanged lock is not rewritten, so DVC and make-like tools see no change.
    """
    if source is None:
        source = read_source(path)
    doc: dict[str, object] = {"version": LOCK_VERSION}
    if source:
        doc["source"] = source
    doc["files"] = {
        rel: {"size": e.size, "sha256": e.sha256} for rel, e in sorted(entries.items())
    }
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    diskwrite.write_text(path, text)


def merge_lock(path: Path, entries: dict[str, Entry]) -> None:
    """Write `entries` into the lock by merging with what the file holds now: entries this
    run knows win, every other entry is kept. A run never erases what it did not see
    (removing clips is `agl.dataset.prepare`'s prune, which writes the whole lock on purpose)."""
    write_lock(path, {**read_lock(path), **entries})


def locked_but_missing(audio_root: Path, relpaths: list[str]) -> tuple[Path, list[str]]:
    """(the lock's path, the clips of `relpaths` it lists whose file is gone): a dataset
    damaged after its download, never a clip that merely failed to download (those are not
    in the lock)."""
    lock_path = Path(audio_root).parent / "lock.json"
    lock = read_lock(lock_path)
    return lock_path, [r for r in relpaths if r in lock and not (Path(audio_root) / r).exists()]
