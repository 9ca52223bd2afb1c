"""Audio files in, samples out: the one decoder and resampler of agl, and the probe.

* `decode` / `decode_head` / `decode_mono` / `load_mono`: float32 samples through soundfile
  (libsndfile >= 1.1 decodes MP3 itself: no ffmpeg, no torchaudio). `resample`: scipy's polyphase filter
  (`resample_poly`, its default Kaiser window), the only resampler agl uses, so the filter,
  the tagger, BirdNET, the interventions and the local backends all hear the same signal.
* `probe`: is this file audio we can use? Open it, decode it to the end, measure its duration.

The probe is used before any inference request (a zero-byte, text, random or cut-off `.mp3` is never sent
to a model, which would invent an answer for it) and by download verification and the filter
(a file that decodes to much less than the manifest's `mp3seconds` is truncated).

Decoding to the end, not trusting the header: an MP3 cut in half keeps a header (or a Xing
frame count) that still claims the full length; only the decoded frames tell the truth.
Decoded block by block, so a long clip never sits in memory whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import numpy as np

BLOCK_FRAMES = 1 << 16


def decode(
    path: str | Path, max_seconds: float | None = None, *, rewind: bool = True
) -> tuple[np.ndarray, int]:
    """(samples[frames, channels] float32, sample rate) of an audio file: all of it, or its
    first `max_seconds`. Raises what soundfile raises for a file it cannot decode
    (LibsndfileError, RuntimeError, ValueError...); callers turn that into a status.

    `rewind`: seek to frame 0 before reading, as `soundfile.read` does (True: the filter,
    the tagger, BirdNET, the interventions), or read straight after opening (False: the local
    backends, `load_mono`). Both are deterministic, but libsndfile's MP3 decoder does not
    give the same samples: on a 16 kHz LAME MP3 (the demo set's clips) about a quarter of
    them differ by one float32 step (44.1 kHz MPEG-1 files decode identically). The two
    ways are kept as each caller always decoded, so that no output pinned in dvc.lock moves;
    making them one would re-record those outputs.
    """
    import soundfile as sf  # loads libsndfile through cffi: only where a file is decoded

    with sf.SoundFile(str(path)) as f:
        sr = int(f.samplerate)
        frames = -1 if max_seconds is None else int(max_seconds * sr)
        if rewind and f.seekable():
            f.seek(0)
        data = f.read(frames=frames, dtype="float32", always_2d=True)
    return data, sr


WAV_SUBTYPE = "PCM_16"  # what a cut window is sent as (agl.inference.windowed says why)


def cut_wavs(path: str | Path, spans: Sequence[tuple[float, float]]) -> list[bytes]:
    """Seconds [start, end) of the file, one WAV (16-bit PCM, the file's own rate and
    channels) per span: decoded once, from the start, as the whole-clip path decodes it."""
    import io

    import soundfile as sf  # as in `decode`

    data, sr = decode(path, max(end for _, end in spans))
    out = []
    for start, end in spans:
        buf = io.BytesIO()
        sf.write(buf, data[int(round(start * sr)):int(round(end * sr))], sr, format="WAV", subtype=WAV_SUBTYPE)
        out.append(buf.getvalue())
    return out


def decode_head(path: str | Path, max_seconds: float, *, rewind: bool = True) -> tuple[np.ndarray, int, bool]:
    """`decode`'s first `max_seconds` (the same samples), and whether the file goes on past
    them. Only those seconds (and one frame more, to know) are decoded and held: a three-hour
    file costs what its first `max_seconds` cost, in time and in memory."""
    import soundfile as sf  # as in `decode`

    with sf.SoundFile(str(path)) as f:
        sr = int(f.samplerate)
        frames = max(1, int(max_seconds * sr))
        if rewind and f.seekable():
            f.seek(0)
        data = f.read(frames=frames + 1, dtype="float32", always_2d=True)
    return data[:frames], sr, data.shape[0] > frames


def decode_mono(
    path: str | Path, max_seconds: float | None = None, *, rewind: bool = True
) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate): `decode`'s channels averaged (`mean(axis=1)`)."""
    data, sr = decode(path, max_seconds, rewind=rewind)
    return data.mean(axis=1), sr


def resample(x: np.ndarray, sr: int, target: int) -> np.ndarray:
    """`x` from `sr` to `target` Hz along its first axis (1-D mono or (frames, channels)),
    as float32; `x` itself when the rates are equal. Polyphase (scipy `resample_poly`,
    up/down reduced by their gcd)."""
    if sr == target:
        return x
    from scipy.signal import resample_poly  # scipy.signal takes ~0.3 s to import

    g = gcd(int(sr), int(target))
    return resample_poly(x, int(target) // g, int(sr) // g, axis=0).astype(np.float32)


def load_mono(path: str | Path, sampling_rate: int, max_seconds: float | None = None) -> np.ndarray:
    """Contiguous float32 mono samples at `sampling_rate`, the first `max_seconds` if given
    (what a model's feature extractor takes). Read without rewinding (see `decode`): the
    local backends' inputs stay what they were."""
    mono, sr = decode_mono(path, max_seconds, rewind=False)
    return np.ascontiguousarray(resample(mono, sr, sampling_rate), dtype=np.float32)


def clip_seconds(path: str | Path) -> float:
    """The clip's full length in seconds, from its header (no decoding; a cut file's header
    may still claim the full length: `probe` decodes to find out)."""
    import soundfile as sf  # as in `decode`

    info = sf.info(str(path))
    return float(info.frames) / float(info.samplerate)


def mime_type(path: str | Path) -> str:
    """The MIME type an API expects for the file's container."""
    suffix = Path(path).suffix.lower()
    return {
        ".mp3": "audio/mpeg", ".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg",
        ".m4a": "audio/mp4", ".aac": "audio/aac", ".opus": "audio/ogg",
    }.get(suffix, "application/octet-stream")


@dataclass(frozen=True)
class Probe:
    """`ok` with the decoded duration, or not `ok` with the reason in words."""

    ok: bool
    seconds: float | None = None
    sample_rate: int | None = None
    channels: int | None = None
    reason: str | None = None


def probe(path: str | Path, max_seconds: float | None = None) -> Probe:
    """Open and decode `path` (completely, or its first `max_seconds` where given: enough
    to know it is audio, in milliseconds); never raises. `seconds` is what was decoded."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        return Probe(False, reason=f"cannot open {path.name}: {exc.strerror or exc}")
    if not path.is_file():
        return Probe(False, reason=f"{path.name} is not a file")
    if size == 0:
        return Probe(False, reason=f"{path.name} is empty (0 bytes)")
    try:
        import soundfile as sf  # as in `decode`

        frames = 0
        with sf.SoundFile(str(path)) as f:
            sr, channels = int(f.samplerate), int(f.channels)
            # Not `f.blocks()`: it counts the frames the header promises (its reused buffer
            # keeps stale samples past the real end); `read` returns what decodes.
            limit = None if max_seconds is None else max(1, int(max_seconds * sr))
            while limit is None or frames < limit:
                want = BLOCK_FRAMES if limit is None else min(BLOCK_FRAMES, limit - frames)
                got = f.read(want, dtype="float32", always_2d=True).shape[0]
                if not got:
                    break
                frames += got
    except Exception as exc:  # soundfile raises LibsndfileError, RuntimeError, ValueError...
        return Probe(False, reason=_decode_failure(path, exc))
    if sr <= 0 or frames == 0:
        return Probe(False, seconds=0.0, sample_rate=sr, channels=channels, reason=f"{path.name} decodes to no samples")
    return Probe(True, seconds=frames / sr, sample_rate=sr, channels=channels)


def _decode_failure(path: Path, exc: Exception) -> str:
    # soundfile quotes the path it was given; the file's name alone keeps the reason the same
    # wherever the folder is (reasons land in DVC-tracked outputs).
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace(str(path), path.name)
    return f"cannot decode {path.name} ({msg})"


def decode_or_reason(path: str | Path) -> tuple[np.ndarray, int] | str:
    """`decode(path)`, or the reason in words (`probe`'s) why the file cannot be used: never
    raises for a zero-byte, text, random or cut file, nor for one that decodes to nothing."""
    path = Path(path)
    got = probe(path, max_seconds=1.0)  # milliseconds; its reasons name empty and text files
    if not got.ok:
        return got.reason or f"{path.name} is not audio"
    try:
        x, sr = decode(path)
    except Exception as exc:  # as in `probe`: cut further in than its first second
        return _decode_failure(path, exc)
    if sr <= 0 or x.shape[0] == 0:
        return f"{path.name} decodes to no samples"
    return x, sr


def duration_problem(
    decoded_s: float, expected_s: float | None, tolerance: float, min_seconds: float = 0.0
) -> tuple[str, str] | None:
    """(code, words) when a decoded duration is unusable, else None.

    `truncated`: shorter than the manifest's `mp3seconds` by more than `tolerance` (a
    fraction: 0.1 accepts 10% less; encoders and the Archive's rounding differ by a frame or
    two, never by half). `too_short`: under `min_seconds`. An unknown or zero expected
    duration is not compared.
    """
    if expected_s and expected_s > 0 and decoded_s < expected_s * (1 - tolerance):
        return (
            "truncated",
            f"decodes to {decoded_s:.1f} s but the manifest says {expected_s:g} s (tolerance {tolerance:.0%})",
        )
    if decoded_s < min_seconds:
        return ("too_short", f"{decoded_s:.2f} s is shorter than min_seconds {min_seconds:g}")
    return None
