"""A run keeps a finished record across reruns only while it still answers for today's data.

A rerun skips the clips a run has already answered, so a record outlives the audio it was
made from unless something checks. Here:

* **per clip**: each record of a backend that listens carries `meta.audio_sha256`, the
  SHA-256 of the bytes its request carried. On a rerun a record whose clip's audio is gone,
  or is no longer those bytes, is dropped from `predictions.jsonl` (so nothing can score it)
  and its clip is asked again; a gone clip then stops the run with the one command that
  restores it (`agl download`). A record written before audio hashes were kept cannot be
  checked and is asked again too (a deterministic backend answers it from the response
  cache, which is keyed by the audio).
* **the whole dataset**: a backend whose answer for one clip depends on the other clips
  (`Backend.reads_dataset`: `knn` listens to its neighbours, `prior` counts the manifest's
  labels) keeps its records only while every clip's key, labels and (for one that listens)
  audio are unchanged: `dataset_digest` goes into its run fingerprint.

"Today's audio" is the dataset's lock (`lock.json` beside the audio root: size and SHA-256 per
clip, written by `agl download`, `agl.dataset.checksums`) where it names the clip, else the
file's own SHA-256. A file whose size differs from its lock entry was changed behind the
lock's back: an error naming it, never a silent re-ask on damaged audio.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agl.dataset.checksums import file_digest, read_lock
from agl.errors import AglError

# Why a kept record is dropped, as the rerun's line says it.
GONE, CHANGED, UNHASHED = ("audio gone", "audio changed since it was asked",
                           "made before audio hashes were kept")


def lock_path(audio_root: Path) -> Path:
    """Where the dataset's lock lives: `data/lock.json` beside `data/audio`."""
    return Path(audio_root).parent / "lock.json"


def hash_files(paths: Sequence[Path]) -> list[str | None]:
    """SHA-256 of each file (None where it cannot be read), a few at a time."""
    def one(path: Path) -> str | None:
        try:
            return file_digest(path).sha256
        except OSError:
            return None

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, paths))


def current_audio(clips: Iterable[Any], audio_root: Path) -> dict[str, str | None]:
    """Clip key -> the SHA-256 of its audio now (None: the file is gone).

    The lock's entry where it names the clip and the file's size agrees (no file is read); a
    size that disagrees is an AglError naming the file; a clip the lock does not name is
    hashed."""
    audio_root = Path(audio_root)
    lock_file = lock_path(audio_root)
    lock = read_lock(lock_file)
    out: dict[str, str | None] = {}
    to_hash: list[tuple[str, Path]] = []
    for c in clips:
        path = audio_root / c.relpath
        try:
            size = path.stat().st_size
        except OSError:
            out[c.key] = None
            continue
        entry = lock.get(c.relpath)
        if entry is None:
            to_hash.append((c.key, path))
        elif entry.size != size:
            raise AglError(
                f"{path}: {size} bytes, but {lock_file} records {entry.size} for "
                f"{c.relpath}: the file changed after it was downloaded; restore it "
                "(`dvc checkout data.dvc`, or delete it and run `agl download`)")
        else:
            out[c.key] = entry.sha256
    for (key, _), digest in zip(to_hash, hash_files([p for _, p in to_hash]), strict=True):
        out[key] = digest
    return out


def stale(records: Mapping[str, Any], current: Mapping[str, str | None]) -> dict[str, str]:
    """Clip key -> why its kept record no longer answers for its audio (GONE, CHANGED,
    UNHASHED); records of clips outside `current` (not in the manifest) are left alone."""
    out = {}
    for key, record in records.items():
        if key not in current:
            continue
        made_from = record.meta.get("audio_sha256")
        if current[key] is None:
            out[key] = GONE
        elif not made_from:
            out[key] = UNHASHED
        elif made_from != current[key]:
            out[key] = CHANGED
    return out


def stale_line(path: Path, reasons: Mapping[str, str]) -> str:
    """One counted line: how many records were dropped, for which reason, with an example."""
    by: dict[str, list[str]] = {}
    for key, why in reasons.items():
        by.setdefault(why, []).append(key)
    parts = [f"{why} (e.g. {keys[0]}): {len(keys)}" if len(by) > 1 else f"{why} (e.g. {keys[0]})"
             for why, keys in by.items()]
    return (f"{path}: {len(reasons)} record(s) dropped: {'; '.join(parts)}; "
            "they are asked again")


def dataset_digest(clips: Iterable[Any], audio: Mapping[str, str | None] | None) -> str:
    """What a backend that reads the whole dataset answers from: each clip's key, file name,
    labels and coordinates, and (`audio` given: it listens) its audio's SHA-256."""
    h = hashlib.sha256()
    for c in clips:
        row = [c.key, c.mp3name, c.city, c.country, c.continent, repr(c.latitude),
               repr(c.longitude)]
        if audio is not None:
            row.append(audio.get(c.key) or "gone")
        h.update(json.dumps(row).encode() + b"\n")
    return h.hexdigest()[:16]
