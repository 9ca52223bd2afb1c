"""Clips already listened to: what Whisper and the VAD heard, kept by content so no clip is
listened to twice.

The speech stage and the `langprior` baseline hear a clip the same way (`agl.speech.listen`),
and on the demo both listen to every clip: a minute of Whisper each. Whichever runs first
keeps what it heard here; the other reads it. DVC may run them in either order, and neither
depends on the other's output, so this cache, like the reply cache, is not a DVC dependency:
an entry is a pure function of its key, and the key is everything that decides what is heard:

* the audio file's SHA-256 (not its path or clip key: a renamed clip is the same sound);
* the model's file digests and the VAD's, the thresholds and windowing (`thresholds()`),
  device, compute type, CPU kernels (`cpu_isa`) and the features' arithmetic
  (`agl.speech.mel`), and the versions of the libraries that
  compute it (faster-whisper, CTranslate2, ONNX Runtime).

An entry holds every float at full precision (JSON's shortest round-trip form), so a clip read
back is the clip as heard, bit for bit, and both readers round it the way they always did.
Clips that could not be heard (missing, unreadable) are never kept. Entries are written whole,
then renamed, so a reader never sees half of one; an entry that does not parse, or holds what
no listening writes (a status not kept, a language code that is not a string, a probability
that is not a finite number in [0, 1], a negative or infinite duration), is a miss: the clip
is heard again, and its entry rewritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from agl.core import diskwrite
from agl.errors import AglError
from agl.executor import ClipTask, map_clips
from agl.executor.config import ExecutorConfig
from agl.speech.languages import check_languages
from agl.speech.listen import ClipSpeech, Listener, SpeechConfig, Window
from agl.speech.mel import MEL_ARITHMETIC
from agl.speech.model import file_sha256

_LIBRARIES = ("faster-whisper", "ctranslate2", "onnxruntime")
_KEPT = ("ok", "uncertain", "no_speech")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def listening_identity(cfg: SpeechConfig, model_files: dict[str, str], vad: dict[str, str]) -> str:
    """The digest of everything but the audio that decides what a clip is heard as."""
    blob = json.dumps({"model": dict(sorted(model_files.items())), "vad": vad,
                       "thresholds": cfg.thresholds(),
                       "compute": [cfg.device, cfg.compute_type, cfg.cpu_isa, MEL_ARITHMETIC],
                       "libraries": {d: _version(d) for d in _LIBRARIES}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def to_doc(heard: ClipSpeech) -> dict[str, Any]:
    """What is kept of a clip heard: everything but its key, error and timings."""
    return {"status": heard.status, "seconds": heard.seconds, "speech_seconds": heard.speech_seconds,
            "segments": [list(s) for s in heard.segments],
            "languages": [[c, p] for c, p in heard.languages],
            "windows": [w.as_dict() for w in heard.windows],
            "speech_windows": heard.speech_windows, "transcript": heard.transcript, "cut": heard.cut}


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise AglError(f"{where}: {value!r} is not a number of seconds")
    return float(value)


def from_doc(key: str, doc: dict[str, Any]) -> ClipSpeech:
    """The clip heard, under `key`, from `to_doc`'s form; an AglError (or KeyError, TypeError,
    ValueError) for an entry no listening writes: the caller treats it as a miss."""
    if doc.get("status") not in _KEPT:
        raise AglError(f"heard entry: status {doc.get('status')!r} is not one kept ({', '.join(_KEPT)})")
    if not isinstance(doc.get("cut", False), bool):
        raise AglError(f"heard entry: cut {doc['cut']!r} is not true or false")
    windows = tuple(Window(tuple((_seconds(s, "span"), _seconds(e, "span")) for s, e in w["spans"]),
                           _seconds(w["speech_seconds"], "window speech_seconds"),
                           check_languages(w["top"], "heard entry window")) for w in doc["windows"])
    return ClipSpeech(key=key, status=doc["status"], seconds=_seconds(doc["seconds"], "seconds"),
                      speech_seconds=_seconds(doc["speech_seconds"], "speech_seconds"),
                      segments=tuple((_seconds(s, "segment"), _seconds(e, "segment")) for s, e in doc["segments"]),
                      languages=check_languages(doc["languages"], "heard entry"), windows=windows,
                      speech_windows=int(doc["speech_windows"]), transcript=doc.get("transcript"),
                      cut=doc.get("cut", False), extra={"vad_s": 0.0, "lid_s": 0.0, "heard_cache": "hit"})


class HeardCache:
    """`folder/<identity[:2]>/<identity>/<audio sha256>.json`, one entry per sound heard."""

    def __init__(self, folder: Path | str, identity: str):
        self.folder = Path(folder) / identity[:2] / identity

    def _path(self, audio_sha256: str) -> Path:
        return self.folder / f"{audio_sha256}.json"

    def get(self, key: str, audio_sha256: str) -> ClipSpeech | None:
        try:
            doc = json.loads(self._path(audio_sha256).read_text(encoding="utf-8"))
            return from_doc(key, doc)
        except (OSError, ValueError, KeyError, TypeError, AglError):  # absent, torn or not heard: listen again
            return None

    def put(self, audio_sha256: str, heard: ClipSpeech) -> None:
        if heard.status not in _KEPT:
            return
        path = self._path(audio_sha256)
        diskwrite.write_text(path, json.dumps(to_doc(heard), sort_keys=True))


class CachedListener:
    """A `Listener` that first asks the cache (`cfg.heard_cache`; None: no cache). Whisper is
    loaded only for the first clip the cache does not answer."""

    def __init__(self, cfg: SpeechConfig):
        self.cfg = cfg
        self.listener = Listener(cfg)
        self.identity, self.vad = self.listener.identity, self.listener.vad
        self.cache = (HeardCache(cfg.heard_cache, listening_identity(cfg, self.identity.files, self.vad))
                      if cfg.heard_cache else None)

    def listen(self, key: str, path: Path) -> ClipSpeech:
        path = Path(path)
        if self.cache is None or not path.is_file():
            return self.listener.listen(key, path)
        digest = file_sha256(path)
        heard = self.cache.get(key, digest)
        if heard is None:
            heard = self.listener.listen(key, path)
            self.cache.put(digest, heard)
        return heard


@dataclass(frozen=True)
class SpeechTask(ClipTask):
    """The speech stage's per-clip work for `agl.executor.map_clips`: each worker loads its
    listener (VAD, then Whisper on the first clip the cache does not answer) once."""

    cfg: SpeechConfig

    def setup(self) -> CachedListener:
        return CachedListener(self.cfg)

    def run(self, state: CachedListener, item: tuple) -> ClipSpeech:
        key, path = item
        return state.listen(key, path)


def listen_clips(items: Sequence[tuple[str, Path]], cfg: SpeechConfig,
                 transport: ExecutorConfig | None = None, facts: dict[str, Any] | None = None) -> list[ClipSpeech]:
    """Every (key, audio path) heard (`off` for each with `enabled: false`), in order, by
    `cfg.jobs` processes or where `transport` says (agl.executor)."""
    if not cfg.enabled:
        return [ClipSpeech(k, "off") for k, _ in items]
    return map_clips(SpeechTask(cfg), items, jobs=cfg.jobs, transport=transport, facts=facts)
