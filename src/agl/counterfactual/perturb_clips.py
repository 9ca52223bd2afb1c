"""A derived dataset's audio, clip by clip: one clip through every level of an intervention
(decoded once, its speech found once, each level's file encoded and written whole), run
where `agl.executor.map_clips` runs it (`counterfactual.jobs` processes here, or shards on
Ray); `agl.counterfactual.effects.derive_dataset` writes the levels' manifests and locks
from what comes back, in the manifest's order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.core import diskwrite
from agl.core.audio import decode_or_reason, resample
from agl.core.container import strip
from agl.counterfactual.encode import MP3_RATES, encode
from agl.counterfactual.perturb import KINDS, Intervention, apply, speech_segments
from agl.dataset.checksums import file_digest
from agl.errors import AglError
from agl.executor import ClipTask, map_clips
from agl.executor.config import ExecutorConfig

AS_PUBLISHED = "as-published"  # the `format` of a container intervention's files (tags, untagged)


def file_name(mp3name: str, fmt: str) -> str:
    """The derived file's name: the original's stem with the format's suffix (the original's
    own name for a container intervention)."""
    if fmt == AS_PUBLISHED:
        return mp3name
    if fmt == "mp3" and mp3name.lower().endswith(".mp3"):
        return mp3name
    return f"{Path(mp3name).stem}.{fmt}"


def _mp3_rate(sr: int) -> int:
    return sr if sr in MP3_RATES else min(MP3_RATES, key=lambda r: (abs(r - sr), r))


@dataclass(frozen=True)
class PerturbTask(ClipTask):
    """One clip through every level of an intervention (decode once, VAD once, each level's
    file written whole): the perturb stage's per-clip work for `agl.executor.map_clips`.
    Items (key, mp3name); the result: (the reason it does not decode, or None; per level the
    row of perturb.csv and the file's lock entry)."""

    parent: Path
    out: Path
    levels: tuple[Intervention, ...]
    fmt: str

    def run(self, state: Any, item: tuple) -> tuple[str | None, dict[str, tuple[dict[str, Any], str, Any]]]:
        key, mp3name = item
        src = self.parent / "audio" / key / mp3name
        if not src.is_file():
            raise AglError(f"{src}: missing; fill {self.parent} first (agl download)")
        got = decode_or_reason(src)
        if isinstance(got, str):
            return got, {}
        x, sr = got
        iv0 = self.levels[0]
        if KINDS[iv0.kind].container:
            return None, _copy_container(src, self.out, key, mp3name, self.levels, x, sr)
        segments = (speech_segments(x, sr, threshold=float(iv0.params["vad_threshold"]))
                    if KINDS[iv0.kind].needs_vad else None)
        done: dict[str, tuple[dict[str, Any], str, Any]] = {}
        for iv in self.levels:
            y, rate, info = apply(iv, x, sr, key=key, segments=segments)
            target = _mp3_rate(rate) if self.fmt == "mp3" else rate
            if target != rate:
                y, rate = resample(y, rate, target), target
            name = file_name(mp3name, self.fmt)
            path = self.out / iv.level / "audio" / key / name
            diskwrite.write_bytes(path, encode(y, rate, self.fmt))
            row = {"key": key, "seconds_in": round(x.shape[0] / sr, 3),
                   "seconds_out": round(y.shape[0] / rate, 3), "rate_out": rate, **info}
            done[iv.level] = (row, f"{key}/{name}", file_digest(path))
        return None, done


def perturb_clips(parent: Path, out: Path, frame: pd.DataFrame, levels: list[Intervention], fmt: str,
                   progress: bool, jobs: int = 1, transport: ExecutorConfig | None = None
                   ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]], dict[str, str]]:
    """Every level's audio of every clip, by `jobs` processes or where `transport` says
    (agl.executor): (measurements per level, lock entries per level, clips that do not
    decode with the reason), in the frame's order whatever ran them."""
    failed: dict[str, str] = {}  # clips that do not decode: left out, with the reason
    per_level: dict[str, list[dict[str, Any]]] = {iv.level: [] for iv in levels}
    locks: dict[str, dict[str, Any]] = {iv.level: {} for iv in levels}
    items = [(str(k), str(n)) for k, n in zip(frame["key"], frame["mp3name"], strict=True)]
    task = PerturbTask(parent, out, tuple(levels), fmt)
    results = map_clips(task, items, jobs=jobs, transport=transport,
                        progress=f"perturb {levels[0].name}" if progress else None)
    # A writer killed mid-file (its node lost, on Ray) leaves its temporary beside the file
    # (agl.core.diskwrite); the shard that ran again wrote the file whole: swept, so the folder
    # holds what a local run writes.
    for stray in out.rglob(".*.tmp"):
        stray.unlink()
    for (key, _), (why, done) in zip(items, results, strict=True):
        if why is not None:
            failed[key] = why
            continue
        for level, (row, rel, digest) in done.items():
            per_level[level].append(row)
            locks[level][rel] = digest
    return per_level, locks, failed


def _copy_container(src: Path, out: Path, key: str, mp3name: str, levels: tuple[Intervention, ...],
                    x: np.ndarray, sr: int) -> dict[str, tuple[dict[str, Any], str, Any]]:
    """A container intervention's file: the original's bytes (`tags`: sent with its tags, the
    listen run told so by the level's lock), or those bytes without their tags (`untagged`:
    an MP3's frames byte-identical)."""
    data = src.read_bytes()
    done = {}
    for iv in levels:
        body = strip(data, src.suffix) if iv.kind == "untagged" else data
        path = out / iv.level / "audio" / key / mp3name
        diskwrite.write_bytes(path, body)
        seconds = round(x.shape[0] / sr, 3)
        done[iv.level] = ({"key": key, "seconds_in": seconds, "seconds_out": seconds, "rate_out": sr,
                           "bytes_removed": len(data) - len(body)}, f"{key}/{mp3name}", file_digest(path))
    return done
