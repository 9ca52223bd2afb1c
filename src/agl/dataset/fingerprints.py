"""Chromaprint fingerprints, and the clips that share an excerpt (duplicates, contamination).

The same recording can sit in AGL1K twice (a re-upload, an excerpt of one walk), which makes
two "independent" clips one and lets `knn` find a clip's twin; and AGL1K's source, Aporee on
the Internet Archive, is SoundingEarth's too (GeoCLAP's and PSM's training set). A raw
Chromaprint fingerprint (`fpcalc -raw`, Debian's `libchromaprint-tools`) is one 32-bit word
per 4096/3 samples at 11,025 Hz (`ITEM_S`, 0.1238 s); two fingerprints of one recording agree
bit for bit where they overlap, after re-encoding, resampling or a gain change, except for a
few bits per word. Two unrelated recordings disagree on half the bits.

`align(a, b)` finds where they overlap: candidate offsets are those where many words agree
exactly (a vote over equal words, AcoustID's approach), each is scored by the bit error rate
(BER) of the words it aligns, and the overlap is the longest run of words whose BER, smoothed
over `WINDOW` words, stays under the threshold. A pair is a duplicate when that run's BER is at
most `max_ber` and it lasts at least `min_overlap_s` (params.yaml `audit:`; docs/baselines.md
says why the values).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agl.core.checks import check_field_types, check_params
from agl.core.diskwrite import replace_atomically
from agl.errors import AglError, reject_unknown_keys

# The thresholds (docs/baselines.md#duplicates-and-contamination): one recording's copies
# measured 0.02 to 0.05 BER (an MP3 re-encode, a 20-s excerpt at half the gain); unrelated
# audio shares almost no word, and aligned by force sits near 0.5. 0.35 is AcoustID's own
# comparison cut-off region; 10 s keeps a shared jingle or a second of silence from counting.
MAX_BER = 0.35
MIN_OVERLAP_S = 10.0
ITEM_S = 4096 / 3 / 11025  # seconds per fingerprint word (Chromaprint's hop at its 11,025 Hz)
WINDOW = 16  # words (~2 s) over which the per-word bit errors are smoothed
CANDIDATES = 3  # offsets tried per pair (the most-voted ones)
INSTALL = ("fpcalc (Chromaprint) is not installed: apt-get install libchromaprint-tools "
           "(Debian/Ubuntu), brew install chromaprint (macOS); .ci/run installs it")


@dataclass(frozen=True)
class Match:
    """Where clip b overlaps clip a: b's word 0 sits at a's word `offset` (seconds: `offset_s`,
    negative when b starts before a), over `length_s` seconds, with bit error rate `ber`."""

    a: str
    b: str
    offset_s: float
    start_a_s: float
    start_b_s: float
    length_s: float
    ber: float

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "offset_s": round(self.offset_s, 2),
                "start_a_s": round(self.start_a_s, 2), "start_b_s": round(self.start_b_s, 2),
                "length_s": round(self.length_s, 2), "ber": round(self.ber, 4)}


def fpcalc_path() -> str:
    path = shutil.which("fpcalc")
    if path is None:
        raise AglError(INSTALL)
    return path


def fingerprint(path: str | Path, max_seconds: float = 0) -> np.ndarray:
    """The raw fingerprint of one audio file (uint32 words); `max_seconds` 0: the whole file.
    One line naming the file when fpcalc cannot read it."""
    cmd = [fpcalc_path(), "-raw", "-length", str(int(max_seconds)), str(path)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        raise AglError(f"{path}: fpcalc took more than 600 s") from None
    # fpcalc exits 3 after a decoding error at the end of an MP3 (it still prints the words
    # it made): the words decide, not the exit status.
    line = next((x for x in out.stdout.splitlines() if x.startswith("FINGERPRINT=")), None)
    if line is None or line == "FINGERPRINT=":
        why = (out.stderr.strip().splitlines() or ["no fingerprint"])[-1]
        raise AglError(f"{path}: fpcalc made no fingerprint ({why}); is it an audio file?")
    return np.array([int(x) for x in line[len("FINGERPRINT="):].split(",")], dtype=np.uint32)


def _popcount(x: np.ndarray) -> np.ndarray:
    return np.unpackbits(x.view(np.uint8).reshape(-1, 4), axis=1).sum(axis=1)


def _offsets(a: np.ndarray, b: np.ndarray) -> list[int]:
    """The most-voted offsets (a's index minus b's) over words equal in both."""
    where: dict[int, list[int]] = {}
    for j, w in enumerate(b.tolist()):
        where.setdefault(w, []).append(j)
    votes: Counter[int] = Counter()
    for i, w in enumerate(a.tolist()):
        for j in where.get(w, ()):
            votes[i - j] += 1
    return [d for d, n in votes.most_common(CANDIDATES) if n >= 2]


def _run(bits: np.ndarray, max_ber: float) -> tuple[int, int, float]:
    """The longest stretch (start, length, its BER) whose smoothed BER stays <= max_ber."""
    n = len(bits)
    w = min(WINDOW, n)
    smooth = np.convolve(bits, np.ones(w) / w, mode="same") / 32.0
    good = smooth <= max_ber
    best = (0, 0)
    start = None
    for i, g in enumerate([*good.tolist(), False]):
        if g and start is None:
            start = i
        elif not g and start is not None:
            if i - start > best[1]:
                best = (start, i - start)
            start = None
    s, length = best
    ber = float(bits[s:s + length].sum() / (32.0 * length)) if length else 1.0
    return s, length, ber


def align(a: np.ndarray, b: np.ndarray, max_ber: float) -> tuple[int, int, int, float] | None:
    """(offset, start in a, length, BER) of the best overlap of b on a, or None."""
    best = None
    for d in _offsets(a, b):
        i0, j0 = max(d, 0), max(-d, 0)
        n = min(len(a) - i0, len(b) - j0)
        if n <= 0:
            continue
        bits = _popcount(a[i0:i0 + n] ^ b[j0:j0 + n])
        s, length, ber = _run(bits, max_ber)
        if length and (best is None or length > best[2]):
            best = (d, i0 + s, length, ber)
    return best


def match(ka: str, a: np.ndarray, kb: str, b: np.ndarray, *, max_ber: float,
          min_overlap_s: float) -> Match | None:
    """The overlap of clips a and b when it is a duplicate under the thresholds, else None."""
    got = align(a, b, max_ber)
    if got is None:
        return None
    d, start_a, length, ber = got
    if length * ITEM_S < min_overlap_s or ber > max_ber:
        return None
    return Match(ka, kb, d * ITEM_S, start_a * ITEM_S, (start_a - d) * ITEM_S, length * ITEM_S, ber)


def duplicates(prints: dict[str, np.ndarray], *, max_ber: float, min_overlap_s: float) -> list[Match]:
    """Every pair of clips sharing an aligned excerpt (keys in sorted order: a < b)."""
    keys = sorted(prints)
    out = []
    for i, ka in enumerate(keys):
        for kb in keys[i + 1:]:
            m = match(ka, prints[ka], kb, prints[kb], max_ber=max_ber, min_overlap_s=min_overlap_s)
            if m is not None:
                out.append(m)
    return out


def groups(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Each key of a linked pair -> its group's representative (the smallest key): clips
    joined by a chain of duplicate pairs are one recording."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {k: find(k) for k in parent}


def read_pairs(path: str | Path) -> list[tuple[str, str]]:
    """The (a, b) pairs of a duplicates table (`agl audit duplicates --json` or its CSV)."""
    path = Path(path)
    if not path.is_file():
        raise AglError(f"{path}: no duplicates table; write it with agl audit duplicates")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            rows = json.loads(text)
            rows = rows.get("pairs", rows) if isinstance(rows, dict) else rows
            return [(str(r["a"]), str(r["b"])) for r in rows]
        import csv
        import io

        return [(r["a"], r["b"]) for r in csv.DictReader(io.StringIO(text))]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise AglError(f"{path}: not a duplicates table ({type(exc).__name__}: {exc}); "
                       "write it with agl audit duplicates") from None


def cached_fingerprint(path: Path, cache_dir: Path | None) -> np.ndarray:
    """`fingerprint(path)`, kept in `cache_dir` under the file's SHA-256 (an outside corpus is
    fingerprinted once)."""
    if cache_dir is None:
        return fingerprint(path)

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    entry = cache_dir / f"{digest}.u32"
    if entry.is_file():
        return np.frombuffer(entry.read_bytes(), dtype="<u4").astype(np.uint32)
    words = fingerprint(path)
    replace_atomically(entry, words.astype("<u4").tobytes())
    return words


TABLE_COLUMNS = ("a", "b", "offset_s", "start_a_s", "start_b_s", "length_s", "ber")


@dataclass(frozen=True)
class DuplicatesConfig:
    """params.yaml `duplicates:` (the pipeline's tracked table, stage `duplicates`)."""

    enabled: bool = False  # false: an empty table, nothing fingerprinted (no fpcalc needed)
    max_ber: float = MAX_BER
    min_overlap_s: float = MIN_OVERLAP_S

    @classmethod
    def from_params(cls, params: dict | None, source: str = "params.yaml duplicates") -> DuplicatesConfig:
        params = dict(params or {})
        reject_unknown_keys(params, {"enabled", "max_ber", "min_overlap_s"}, source)
        check_params("duplicates", params, source.split()[0])  # the one table (agl.core.checks.PARAMS)
        cfg = cls(**params)
        check_field_types(cfg, source)
        return cfg


def duplicates_table(clips: Sequence, audio_root: str | Path, cfg: DuplicatesConfig):
    """The pipeline's duplicates table (one row per pair, `TABLE_COLUMNS`, sorted by a, b):
    empty when `cfg.enabled` is false. A clip whose file is missing is one line."""
    import pandas as pd

    if not cfg.enabled:
        return pd.DataFrame(columns=list(TABLE_COLUMNS))
    fpcalc_path()
    prints = {}
    for c in clips:
        path = Path(audio_root) / c.relpath
        if not path.is_file():
            raise AglError(f"{path}: missing (clip {c.key}); run agl download")
        prints[c.key] = fingerprint(path)
    pairs = duplicates(prints, max_ber=cfg.max_ber, min_overlap_s=cfg.min_overlap_s)
    return pd.DataFrame([m.as_dict() for m in pairs], columns=list(TABLE_COLUMNS))
