"""Per clip: how many seconds of speech (VAD), and which language it is (Whisper).

1. Decode to mono, resample to 16 kHz (scipy polyphase, as the tag stage does): the clip's
   first `max_listen_s` only (600 s, three times AGL1K's longest clip), decoded no further, so
   a three-hour file costs what ten minutes cost (docs/speech.md#long-clips). A clip that goes
   on past it is marked `cut`; `seconds` is what was heard.
2. Voice activity: Silero VAD v6 as faster-whisper ships it (ONNX), run batched: the whole
   clip's 32 ms frames go through the network 10,000 frames per call, so a 30-minute clip
   costs seconds. Frames above `vad_threshold` open a segment, `vad_min_silence_ms` of quiet
   closes it, segments shorter than `vad_min_speech_ms` are dropped, each is padded by
   `vad_pad_ms`. `speech_seconds` is the time the padded segments cover.
3. Fewer than `min_speech_s` seconds of speech: status `no_speech`. No language is guessed:
   Whisper fed silence or birdsong still names a language (on silence it says English 0.57;
   on the Essaouira muezzin recording it says Nynorsk), so the identifier never sees a clip
   the VAD does not vouch for.
4. Language ID runs on the speech only: the padded segments are joined and cut into windows
   of `window_s` (Whisper's 30 s input). Each window gets Whisper's probability over its 99
   languages; the clip's distribution is the mean of its windows' weighted by their speech
   seconds. Windows are read in order and reading stops once the running distribution's top
   language reaches `confident`, or after `max_windows`, so a long clip costs a few encoder
   passes at most. A last window shorter than `min_speech_s` is skipped (one window is always read).
5. The top language below `min_language_probability`: status `uncertain` (the candidates are
   kept, the clip gets no language). Otherwise `ok` with the language and its probability.
6. Optionally (`transcribe: true`) every speech window (not only those read for the
   language) is transcribed in the identified language (beam `beam_size`, temperature 0,
   no conditioning on earlier text).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from agl.core.audio import decode_head, decode_mono, resample
from agl.core.checks import check_field_types, check_params
from agl.errors import AglError, reject_unknown_keys
from agl.speech.languages import check_languages
from agl.speech.model import CPU_ISAS, load_whisper, pin_kernels, resolve, vad_identity

RATE = 16_000
STATUSES = ("ok", "uncertain", "no_speech", "missing", "unreadable", "off")


@dataclass(frozen=True)
class SpeechConfig:
    """params.yaml `speech:` (the stage) and the langprior backend's listening settings."""

    enabled: bool = True
    model: str = "pypi-whisper-base"
    sha256: dict[str, str] = field(default_factory=dict)  # pins for a named / folder model
    device: str = "cpu"
    compute_type: str = "float32"  # not int8: see tables.py on bit-stability
    cpu_isa: str = "AVX2"  # CTranslate2/oneDNN kernels, pinned so digits do not name the CPU (model.py)
    threads: int = 2
    cache_dir: str = "cache/whisper"
    # What each clip was heard as, by content (agl.speech.heard); None: listen every time.
    heard_cache: str | None = "cache/speech"
    vad_threshold: float = 0.5
    vad_min_speech_ms: int = 250
    vad_min_silence_ms: int = 500
    vad_pad_ms: int = 200
    min_speech_s: float = 2.0
    window_s: float = 30.0
    max_windows: int = 4
    confident: float = 0.9
    min_language_probability: float = 0.5
    top_languages: int = 5
    transcribe: bool = False
    beam_size: int = 1
    only_passed: bool = True
    # Seconds of a clip heard at most (decoded at most): a long file costs what this costs.
    max_listen_s: float = 600.0
    # Processes listening at once on this host (agl.executor; the same rows for any value).
    # 1: on the demo a second process costs more CPU (its imports, its own Whisper) than it saves.
    jobs: int = 1

    @classmethod
    def from_params(cls, params: dict[str, Any] | None, source: str = "params.yaml speech") -> SpeechConfig:
        params = dict(params or {})
        reject_unknown_keys(params, {f.name for f in fields(cls)}, source)
        check_params("speech", params, source.split()[0])  # the one table (agl.core.checks.PARAMS)
        pins = params.get("sha256") or {}
        if not isinstance(pins, dict):
            raise AglError(f"{source}.sha256: {pins!r} is not a mapping of file name to SHA-256; "
                           "e.g. sha256: {model.bin: <64 hex digits>}, or {} for none")
        params["sha256"] = dict(pins)
        # (`enabled: 'yes please'` is text, and text is truthy: the table takes YAML's true /
        # false alone.) 600 and 600.0 are one setting: one key of the heard cache (agl.speech.heard)
        params["max_listen_s"] = float(params.get("max_listen_s", cls.max_listen_s))
        cfg = cls(**params)
        check_field_types(cfg, source)  # text keys: 'model: 3' is one line naming the key
        if cfg.cpu_isa not in (*CPU_ISAS, "native"):
            raise AglError(f"{source}.cpu_isa: must be one of {', '.join((*CPU_ISAS, 'native'))}, got {cfg.cpu_isa!r}")
        return cfg

    def thresholds(self) -> dict[str, Any]:
        """The knobs that decide a clip's status and language (recorded with the outputs)."""
        skip = {"enabled", "model", "sha256", "device", "threads", "cache_dir", "only_passed", "cpu_isa",
                "heard_cache", "jobs"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


@dataclass(frozen=True)
class Window:
    """One language-ID window: the clip-time spans it joins, and what Whisper heard in it."""

    spans: tuple[tuple[float, float], ...]
    speech_seconds: float
    top: tuple[tuple[str, float], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"spans": [list(s) for s in self.spans], "speech_seconds": self.speech_seconds,
                "top": [[c, p] for c, p in self.top]}


@dataclass(frozen=True)
class ClipSpeech:
    key: str
    status: str
    seconds: float | None = None
    speech_seconds: float | None = None
    segments: tuple[tuple[float, float], ...] = ()
    languages: tuple[tuple[str, float], ...] = ()  # the clip's distribution, top first
    windows: tuple[Window, ...] = ()  # the windows read (language ID stops once confident)
    speech_windows: int = 0  # windows of speech in the clip
    transcript: str | None = None  # `transcribe: true` and a language identified
    error: str | None = None
    cut: bool = False  # the clip goes on past `max_listen_s`: only its first `seconds` were heard
    extra: dict[str, Any] = field(default_factory=dict)  # timings: never in a tracked output

    @property
    def language(self) -> str | None:
        return self.languages[0][0] if self.status == "ok" and self.languages else None

    @property
    def probability(self) -> float | None:
        return self.languages[0][1] if self.languages else None


def decode_16k(path: Path, max_seconds: float | None = None) -> np.ndarray:
    """Mono float32 samples at 16 kHz: the project's one decode and resample, read as the
    filter, the tagger and BirdNET read it (rewound), so every curation stage hears the same
    signal. (Read without rewinding, a quarter of a 16 kHz LAME MP3's samples differ by one
    float32 step, and on the demo's babble that moves Whisper's top probability by up to 0.04.)
    `max_seconds`: only the first seconds, decoded no further (`decode_bounded`)."""
    return decode_bounded(path, max_seconds)[0] if max_seconds is not None else _to_16k(*decode_mono(path))


def decode_bounded(path: Path, max_seconds: float) -> tuple[np.ndarray, bool]:
    """(the first `max_seconds` at 16 kHz, whether the file goes on past them): the same
    samples as `decode_16k`'s for a clip no longer than that. Only those seconds are decoded."""
    data, sr, more = decode_head(path, max_seconds)
    return _to_16k(data.mean(axis=1), sr), more


def _to_16k(mono: np.ndarray, sr: int) -> np.ndarray:
    return np.ascontiguousarray(resample(mono, sr, RATE), dtype=np.float32)


def speech_segments(audio: np.ndarray, cfg: SpeechConfig) -> list[tuple[int, int]]:
    """(start, end) samples of the padded speech segments (batched Silero VAD)."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    if len(audio) < 512:
        return []
    opts = VadOptions(threshold=float(cfg.vad_threshold), min_speech_duration_ms=int(cfg.vad_min_speech_ms),
                      min_silence_duration_ms=int(cfg.vad_min_silence_ms), speech_pad_ms=int(cfg.vad_pad_ms))
    return [(int(s["start"]), int(s["end"])) for s in get_speech_timestamps(audio, opts)]


def cut_windows(segments: Sequence[tuple[int, int]], window: int, min_tail: int) -> list[list[tuple[int, int]]]:
    """The speech segments joined end to end and cut every `window` samples: each window's
    list of (start, end) pieces in clip samples. A last window shorter than `min_tail`
    samples is dropped unless it is the only one."""
    out: list[list[tuple[int, int]]] = [[]]
    room = window
    for start, end in segments:
        while start < end:
            take = min(end - start, room)
            out[-1].append((start, start + take))
            start += take
            room -= take
            if room == 0:
                out.append([])
                room = window
    out = [w for w in out if w]
    if len(out) > 1 and sum(e - s for s, e in out[-1]) < min_tail:
        out.pop()
    return out


def _mixture(vectors: list[dict[str, float]], weights: list[float]) -> list[tuple[str, float]]:
    total = sum(weights)
    mix: dict[str, float] = {}
    for vec, w in zip(vectors, weights, strict=True):
        for code, p in vec.items():
            mix[code] = mix.get(code, 0.0) + p * w / total
    # ties by code so the order never depends on dict order
    return sorted(mix.items(), key=lambda kv: (-kv[1], kv[0]))


class Listener:
    """The Whisper model and VAD loaded once; `listen` gives a clip's `ClipSpeech`."""

    def __init__(self, cfg: SpeechConfig):
        self.cfg = cfg
        self.identity = resolve(cfg.model, Path(cfg.cache_dir), cfg.sha256)
        self.vad = vad_identity()
        # Now, not when Whisper loads: the VAD's import of faster_whisper loads CTranslate2,
        # which reads its kernel settings once per process.
        pin_kernels(cfg.cpu_isa)
        self._whisper = None

    @property
    def whisper(self):
        # Loaded on the first clip that needs it: one whose hearing is cached costs no model.
        if self._whisper is None:
            cfg = self.cfg
            self._whisper = load_whisper(self.identity, device=cfg.device, compute_type=cfg.compute_type,
                                         threads=cfg.threads, cpu_isa=cfg.cpu_isa)
        return self._whisper

    def language_probabilities(self, audio: np.ndarray) -> dict[str, float]:
        """Whisper's distribution over its languages for one window of <= 30 s."""
        _, _, probs = self.whisper.detect_language(audio=audio, language_detection_segments=1)
        # Checked as they enter: a NaN from a broken model would rank every country by NaN.
        return dict(check_languages([(str(code), float(p)) for code, p in probs], "Whisper's language ID"))

    def transcript(self, audio: np.ndarray, language: str) -> str:
        segments, _ = self.whisper.transcribe(audio, language=language, beam_size=int(self.cfg.beam_size),
                                              temperature=0.0, condition_on_previous_text=False,
                                              vad_filter=False, without_timestamps=True)
        return " ".join(s.text.strip() for s in segments).strip()

    def listen_samples(self, key: str, audio: np.ndarray, cut: bool = False) -> ClipSpeech:
        cfg = self.cfg
        t0 = time.perf_counter()
        segs = speech_segments(audio, cfg)
        vad_s = time.perf_counter() - t0
        seconds = len(audio) / RATE
        spans = tuple((s / RATE, e / RATE) for s, e in segs)
        speech_s = sum(e - s for s, e in segs) / RATE
        base = {"key": key, "seconds": seconds, "speech_seconds": speech_s, "segments": spans, "cut": cut}
        if speech_s < cfg.min_speech_s or not segs:
            return ClipSpeech(status="no_speech", extra={"vad_s": vad_s, "lid_s": 0.0}, **base)
        pieces = cut_windows(segs, round(cfg.window_s * RATE), round(cfg.min_speech_s * RATE))
        vectors, weights, read = [], [], []
        t1 = time.perf_counter()
        for piece in pieces[: int(cfg.max_windows)]:
            chunk = np.concatenate([audio[s:e] for s, e in piece])
            vectors.append(self.language_probabilities(chunk))
            weights.append(len(chunk) / RATE)
            read.append((piece, chunk))
            if _mixture(vectors, weights)[0][1] >= cfg.confident:
                break
        lid_s = time.perf_counter() - t1
        mix = _mixture(vectors, weights)[: int(cfg.top_languages)]
        status = "ok" if mix[0][1] >= cfg.min_language_probability else "uncertain"
        windows = []
        for (piece, _chunk), vec, w in zip(read, vectors, weights, strict=True):
            top = tuple(sorted(vec.items(), key=lambda kv: (-kv[1], kv[0]))[: int(cfg.top_languages)])
            windows.append(Window(tuple((s / RATE, e / RATE) for s, e in piece), w, top))
        text = None
        if cfg.transcribe and status == "ok":  # every speech window, not only those read for the language
            text = " ".join(self.transcript(np.concatenate([audio[s:e] for s, e in piece]), mix[0][0])
                            for piece in pieces).strip()
        return ClipSpeech(status=status, languages=tuple(mix), windows=tuple(windows), speech_windows=len(pieces),
                          transcript=text, extra={"vad_s": vad_s, "lid_s": lid_s}, **base)

    def listen(self, key: str, path: Path) -> ClipSpeech:
        path = Path(path)
        if not path.is_file():
            return ClipSpeech(key, "missing", error=f"{path} not found")
        try:
            audio, cut = decode_bounded(path, float(self.cfg.max_listen_s))
        except Exception as exc:  # soundfile raises several types for a bad file
            return ClipSpeech(key, "unreadable", error=f"{type(exc).__name__}: {exc}".replace("\n", " "))
        return self.listen_samples(key, audio, cut)
