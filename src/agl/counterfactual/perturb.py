"""Controlled audio interventions: small pure functions over samples, one per kind.

Every intervention takes float32 samples shaped (frames, channels) and a sample rate and
returns new samples and their rate; nothing is read or written here. Randomness comes only
from the `numpy.random.Generator` passed in, so the same seed gives the same samples.

params.yaml `perturb:` maps a name to `{kind, <strength...>, seed}`. A list where a kind
takes a number (truncate.seconds, noise.snr_db, reverb.rt60_s) makes a graded intervention:
one derived dataset per level, for dose-response curves.

Kinds (see README "What the models listen to"):
  none         the clip's samples unchanged, re-encoded (the machinery's own noise floor: the
               re-encoding; it also drops the file's tags, which a tag-free run never sent)
  tags         the clip's file as published, byte for byte, sent WITH its container tags:
               against a run's tag-free audio, the paired effect of the tags alone
  untagged     the clip's file with its tags removed, not re-encoded (agl.core.container):
               against a `paper` protocol run (which sent the tags), the effect of removing
               them; against a tag-free run, a zero effect by construction; `none` against
               `untagged` is the re-encoding alone
  mask_speech  speech segments (silero-vad) replaced in place, not cut: fill `background`
               loops the clip's own non-speech parts, `noise` is noise with their spectrum
  keep_speech  the inverse: the non-speech parts silenced (fill `silence`) or noise-filled
  truncate     only the first `seconds`
  noise        coloured noise (`colour`: white | pink | brown; no speech in it) at `snr_db`
  channel      telephone: mono, 8 kHz, a codec (`codec`: gsm | mp3 | none), band 300-3400 Hz
  reverb       a simulated shoebox room (pyroomacoustics image source) with `rt60_s`
  reverse      time-reversed (keeps the spectrum and the voice, removes the words)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agl.core.audio import resample
from agl.core.checks import check_param, check_value, param_rule
from agl.core.paths import is_plain_name
from agl.core.vad import RATE as VAD_RATE
from agl.core.vad import speech_timestamps
from agl.errors import AglError, reject_unknown_keys

TELEPHONE_RATE = 8000
TELEPHONE_BAND_HZ = (300.0, 3400.0)

Segments = list[tuple[int, int]]  # [start, end) sample indices at the clip's own rate


# --- helpers ------------------------------------------------------------------------------------


def as_frames(x: np.ndarray) -> np.ndarray:
    """(frames, channels) float32, whatever came in (1-D mono is one channel)."""
    x = np.asarray(x, dtype=np.float32)
    return x[:, None] if x.ndim == 1 else x


def mono(x: np.ndarray) -> np.ndarray:
    """The mean of the channels, float32 (1-D input is already mono)."""
    return as_frames(x).mean(axis=1)


def power(x: np.ndarray) -> float:
    """Mean square (float64 accumulation); 0 for no samples."""
    return float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0


def coloured_noise(rng: np.random.Generator, n: int, colour: str = "pink") -> np.ndarray:
    """Unit-power Gaussian noise with a 1/f^a power spectrum (white a=0, pink 1, brown 2).

    Stationary and structureless: no speech or any other source in it."""
    exponent = {"white": 0.0, "pink": 1.0, "brown": 2.0}.get(colour)
    if exponent is None:
        raise AglError(f"noise colour '{colour}': choose white, pink or brown")
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(spec.size, dtype=np.float64)
    f[0] = 1.0
    spec /= f ** (exponent / 2)
    spec[0] = 0.0
    y = np.fft.irfft(spec, n)
    return (y / np.sqrt(max(power(y), 1e-30))).astype(np.float32)


def shaped_noise(rng: np.random.Generator, n: int, like: np.ndarray) -> np.ndarray:
    """Noise of length n with the average magnitude spectrum and power of `like` (mono).

    Random phases over `like`'s spectrum, tiled: the background's colour and level without
    its events (a bird call in the background is not copied into the masked speech)."""
    like = np.asarray(like, dtype=np.float64)
    if like.size < 2 or power(like) == 0.0:
        return np.zeros(n, dtype=np.float32)
    size = min(like.size, 4096)
    frames = [like[i : i + size] for i in range(0, like.size - size + 1, size)] or [like[:size]]
    mag = np.mean([np.abs(np.fft.rfft(f)) for f in frames], axis=0)
    out = np.empty(0)
    while out.size < n:
        phase = np.exp(2j * np.pi * rng.random(mag.size))
        out = np.concatenate([out, np.fft.irfft(mag * phase, size)])
    out = out[:n]
    out *= np.sqrt(power(like) / max(power(out), 1e-30))
    return out.astype(np.float32)


def complement(segments: Segments, n: int) -> Segments:
    """The parts of [0, n) that no segment covers."""
    out, pos = [], 0
    for s, e in sorted(segments):
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
    if pos < n:
        out.append((pos, n))
    return out


def merge(segments: Segments, n: int, pad: int = 0) -> Segments:
    """Segments widened by `pad` samples each side, clipped to [0, n), overlaps joined."""
    out: Segments = []
    for s, e in sorted((max(0, s - pad), min(n, e + pad)) for s, e in segments):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def speech_segments(x: np.ndarray, sr: int, *, threshold: float = 0.5) -> Segments:
    """Where silero-vad hears speech, as [start, end) samples at the clip's own rate (its ONNX
    model, run by agl.core.vad without torch: the package's segments, sample for sample)."""
    audio = resample(mono(x), sr, VAD_RATE)
    stamps = speech_timestamps(audio, threshold=threshold)
    n = as_frames(x).shape[0]
    scale = sr / VAD_RATE
    return merge([(int(round(s["start"] * scale)), int(round(s["end"] * scale))) for s in stamps], n)


# --- the interventions (pure) --------------------------------------------------------------------


def identity(x: np.ndarray, sr: int) -> tuple[np.ndarray, int]:
    """The clip unchanged (a copy)."""
    return as_frames(x).copy(), sr


def mask_segments(
    x: np.ndarray, sr: int, segments: Segments, *, fill: str, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """`segments` replaced in place (same length and timing); everything else bit-identical.

    fill: `background` loops the clip's own uncovered samples through each segment;
    `noise` is noise with the uncovered parts' spectrum and level; `silence` is zeros."""
    x = as_frames(x)
    y = x.copy()
    n = x.shape[0]
    segments = merge(segments, n)
    if not segments:
        return y, sr
    rest = complement(segments, n)
    background = np.concatenate([x[s:e] for s, e in rest]) if rest else x[:0]
    if fill == "background" and background.shape[0] < max(1, sr // 10):
        fill = "noise"  # almost nothing to loop: fall back to noise shaped to the whole clip
        background = x
    for s, e in segments:
        m = e - s
        if fill == "silence":
            y[s:e] = 0.0
        elif fill == "background":
            start = int(rng.integers(0, background.shape[0]))
            idx = (start + np.arange(m)) % background.shape[0]
            y[s:e] = background[idx]
        elif fill == "noise":
            src = background if background.shape[0] else x
            for c in range(x.shape[1]):
                y[s:e, c] = shaped_noise(rng, m, src[:, c])
        else:
            raise AglError(f"fill '{fill}': choose background, noise or silence")
    return y, sr


def truncate(x: np.ndarray, sr: int, *, seconds: float) -> tuple[np.ndarray, int]:
    """The first `seconds` exactly (round(seconds * sr) samples), or all if shorter."""
    if seconds <= 0:
        raise AglError(f"truncate: seconds must be positive, not {seconds}")
    return as_frames(x)[: int(round(seconds * sr))].copy(), sr


def add_noise(
    x: np.ndarray, sr: int, *, snr_db: float, colour: str, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """x + noise scaled so that power(x) / power(noise) is `snr_db` (over the mono mix)."""
    x = as_frames(x)
    p = power(mono(x))
    if p == 0.0:
        return x.copy(), sr  # a silent clip has no SNR to hit; it stays silent
    noise = coloured_noise(rng, x.shape[0], colour) * np.sqrt(p / 10 ** (snr_db / 10))
    return (x + noise[:, None]).astype(np.float32), sr


def band_limit(x: np.ndarray, sr: int, lo_hz: float, hi_hz: float) -> np.ndarray:
    """Brick-wall band-pass by FFT: every bin outside [lo, hi] zeroed (no leakage skirt)."""
    spec = np.fft.rfft(x, axis=0)
    f = np.fft.rfftfreq(x.shape[0], 1 / sr)
    spec[(f < lo_hz) | (f > hi_hz)] = 0
    return np.fft.irfft(spec, x.shape[0], axis=0).astype(np.float32)


def telephone(x: np.ndarray, sr: int, *, codec: str = "gsm", mp3_vbr_quality: float = 9.0) -> tuple[np.ndarray, int]:
    """A phone line: mono, 8 kHz, a codec (pedalboard: GSM full rate or LAME MP3), then the
    300-3400 Hz band (last, so the codec's own noise cannot leak outside it)."""
    y = resample(mono(x)[:, None], sr, TELEPHONE_RATE)
    if codec != "none":
        import pedalboard

        if codec == "gsm":
            plugin = pedalboard.GSMFullRateCompressor()
        elif codec == "mp3":
            plugin = pedalboard.MP3Compressor(vbr_quality=float(mp3_vbr_quality))
        else:
            raise AglError(f"channel codec '{codec}': choose gsm, mp3 or none")
        y = plugin(np.ascontiguousarray(y.T), TELEPHONE_RATE).T
    return band_limit(y, TELEPHONE_RATE, *TELEPHONE_BAND_HZ), TELEPHONE_RATE


def room_impulse_response(
    sr: int, rt60_s: float, room_m: tuple[float, float, float], rng: np.random.Generator
) -> np.ndarray:
    """A shoebox room's impulse response (pyroomacoustics image source, Sabine absorption),
    source and microphone at seeded places at least 1 m apart inside the room."""
    import pyroomacoustics as pra

    room_m = tuple(float(v) for v in room_m)
    absorption, max_order = pra.inverse_sabine(float(rt60_s), list(room_m))
    room = pra.ShoeBox(list(room_m), fs=int(sr), materials=pra.Material(absorption), max_order=int(min(max_order, 40)))
    dims = np.asarray(room_m)
    while True:
        src, mic = 0.5 + rng.random((2, 3)) * (dims - 1.0)
        if np.linalg.norm(src - mic) >= 1.0:
            break
    room.add_source(src.tolist())
    room.add_microphone(mic.tolist())
    room.compute_rir()
    rir = np.asarray(room.rir[0][0], dtype=np.float64)
    return (rir / np.max(np.abs(rir))).astype(np.float32)


def reverb(
    x: np.ndarray, sr: int, *, rt60_s: float, room_m: tuple[float, float, float], rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """x convolved with a simulated room, trimmed to its length, at the dry clip's power."""
    from scipy.signal import fftconvolve

    x = as_frames(x)
    rir = room_impulse_response(sr, rt60_s, room_m, rng)
    wet = fftconvolve(x, rir[:, None], axes=0)[: x.shape[0]]
    gain = np.sqrt(power(x) / max(power(wet), 1e-30)) if power(x) else 0.0
    return (wet * gain).astype(np.float32), sr


def reverse(x: np.ndarray, sr: int) -> tuple[np.ndarray, int]:
    """The clip time-reversed."""
    return as_frames(x)[::-1].copy(), sr


# --- params: name -> {kind, ...} ----------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What a kind accepts: its parameters with defaults, and which one may be graded."""

    params: dict[str, Any]
    graded: str | None = None
    needs_vad: bool = False
    # The file itself, not its samples (tags, untagged): copied as published or with its
    # tags cut off, never decoded and re-encoded, whatever counterfactual.format says.
    container: bool = False


KINDS: dict[str, Kind] = {
    "none": Kind({}),
    "mask_speech": Kind({"fill": "background", "pad_s": 0.25, "vad_threshold": 0.5}, needs_vad=True),
    "keep_speech": Kind({"fill": "silence", "pad_s": 0.25, "vad_threshold": 0.5}, needs_vad=True),
    "truncate": Kind({"seconds": 10.0}, graded="seconds"),
    "noise": Kind({"snr_db": 10.0, "colour": "pink"}, graded="snr_db"),
    "channel": Kind({"codec": "gsm", "mp3_vbr_quality": 9.0}),
    "reverb": Kind({"rt60_s": 0.8, "room_m": [8.0, 6.0, 3.0]}, graded="rt60_s"),
    "reverse": Kind({}),
    "tags": Kind({}, container=True),
    "untagged": Kind({}, container=True),
}


@dataclass(frozen=True)
class Intervention:
    """One level of a named intervention: what `apply` does to every clip."""

    name: str  # the params.yaml key
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    level: str = "default"  # the folder of this level: `default`, or `<param>_<value>`
    value: float | None = None  # the graded parameter's value at this level

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "level": self.level,
            "value": self.value,
            "seed": self.seed,
            **self.params,
        }


def parse_perturb(section: Any, source: str = "params.yaml") -> dict[str, list[Intervention]]:
    """params.yaml `perturb:` as name -> its levels (one for an ungraded intervention)."""
    if not isinstance(section, dict) or not section:
        raise AglError(f"{source}: perturb: expected a mapping of name -> {{kind, ..., seed}}")
    out: dict[str, list[Intervention]] = {}
    for name, entry in section.items():
        where = f"{source}: perturb.{name}"
        if not isinstance(name, str) or not is_plain_name(name) or "@" in name:
            raise AglError(f"{where}: the name must be a plain folder name")
        if not isinstance(entry, dict) or not isinstance(entry.get("kind"), str) or entry["kind"] not in KINDS:
            raise AglError(f"{where}.kind: choose one of {', '.join(KINDS)}")
        kind = KINDS[entry["kind"]]
        reject_unknown_keys(entry, {"kind", "seed", *kind.params}, where)
        seed = entry.get("seed", 0)
        check_param(f"perturb.{name}.seed", seed, source)  # the one table (agl.core.checks.PARAMS)
        params = {k: entry.get(k, v) for k, v in kind.params.items()}
        for k, v in params.items():
            default = kind.params[k]
            if param_rule(f"perturb.{name}.{k}") is not None:
                # the one table (agl.core.checks.PARAMS): a vad_threshold of 1.5 heard no speech
                # anywhere, `seconds: 0` or `pad_s: -1` was cut without a word
                check_param(f"perturb.{name}.{k}", v, source)
            elif isinstance(default, int | float) and not isinstance(default, bool) and not isinstance(v, list):
                check_value(k, v, where, rule="number", example=str(default))  # `mp3_vbr_quality: four`
            if isinstance(v, list) and k != "room_m" and k != kind.graded:
                raise AglError(f"{where}.{k}: only {kind.graded or 'nothing'} takes a list here")
        graded = params.get(kind.graded) if kind.graded else None
        if isinstance(graded, list):
            if not graded or not all(isinstance(v, int | float) for v in graded):
                raise AglError(f"{where}.{kind.graded}: expected a non-empty list of numbers")
            out[name] = [
                Intervention(
                    name,
                    entry["kind"],
                    {**params, kind.graded: float(v)},
                    seed,
                    level=f"{kind.graded}_{float(v):g}",
                    value=float(v),
                )
                for v in sorted(set(graded))
            ]
        else:
            value = float(graded) if isinstance(graded, int | float) else None
            out[name] = [Intervention(name, entry["kind"], params, seed, value=value)]
    return out


def clip_rng(seed: int, key: str) -> np.random.Generator:
    """A clip's own stream: depends on the seed and the clip, not on which clips run."""
    import hashlib

    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, digest])


def apply(
    iv: Intervention, x: np.ndarray, sr: int, *, key: str = "", segments: Segments | None = None
) -> tuple[np.ndarray, int, dict[str, Any]]:
    """One clip through one intervention level: (samples, rate, what was measured).

    `segments` (speech, at sr) skips the VAD when the caller has them already."""
    x = as_frames(x)
    rng = clip_rng(iv.seed, key)
    p = iv.params
    info: dict[str, Any] = {}
    if KINDS[iv.kind].needs_vad:
        if segments is None:
            segments = speech_segments(x, sr, threshold=float(p["vad_threshold"]))
        pad = int(round(float(p["pad_s"]) * sr))
        speech = merge(segments, x.shape[0], pad)
        info["speech_s"] = round(sum(e - s for s, e in segments) / sr, 3)
        info["replaced_s"] = round(sum(e - s for s, e in speech) / sr, 3)
        target = speech if iv.kind == "mask_speech" else complement(speech, x.shape[0])
        if iv.kind == "keep_speech":
            info["replaced_s"] = round(sum(e - s for s, e in target) / sr, 3)
        y, rate = mask_segments(x, sr, target, fill=str(p["fill"]), rng=rng)
    else:
        y, rate = _PLAIN[iv.kind](x, sr, p, rng)
    return y, rate, info


_PLAIN: dict[str, Callable[..., tuple[np.ndarray, int]]] = {
    "none": lambda x, sr, p, rng: identity(x, sr),
    "truncate": lambda x, sr, p, rng: truncate(x, sr, seconds=float(p["seconds"])),
    "noise": lambda x, sr, p, rng: add_noise(x, sr, snr_db=float(p["snr_db"]), colour=str(p["colour"]), rng=rng),
    "channel": lambda x, sr, p, rng: telephone(
        x, sr, codec=str(p["codec"]), mp3_vbr_quality=float(p["mp3_vbr_quality"])
    ),
    "reverb": lambda x, sr, p, rng: reverb(x, sr, rt60_s=float(p["rt60_s"]), room_m=tuple(p["room_m"]), rng=rng),
    "reverse": lambda x, sr, p, rng: reverse(x, sr),
}
