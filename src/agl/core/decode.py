"""Decoding and resampling audio for the local backends (no ffmpeg, no torchaudio).

soundfile (libsndfile >= 1.1) decodes MP3 itself; scipy's polyphase resampler converts to
the rate a model's processor expects.
"""

from __future__ import annotations

from math import gcd
from pathlib import Path

import numpy as np


def load_mono(path: str | Path, sampling_rate: int, max_seconds: float | None = None) -> np.ndarray:
    """float32 mono samples at `sampling_rate`, the first `max_seconds` if given."""
    import soundfile as sf
    from scipy.signal import resample_poly

    with sf.SoundFile(str(path)) as f:
        native = f.samplerate
        frames = -1 if max_seconds is None else int(max_seconds * native)
        data = f.read(frames=frames, dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    if native != sampling_rate:
        g = gcd(int(native), int(sampling_rate))
        mono = resample_poly(mono, sampling_rate // g, native // g).astype(np.float32)
    return np.ascontiguousarray(mono, dtype=np.float32)


def clip_seconds(path: str | Path) -> float:
    """The clip's full length in seconds, from its header (no decoding)."""
    import soundfile as sf

    info = sf.info(str(path))
    return float(info.frames) / float(info.samplerate)


def mime_type(path: str | Path) -> str:
    """The MIME type an API expects for the file's container."""
    suffix = Path(path).suffix.lower()
    return {
        ".mp3": "audio/mpeg", ".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg",
        ".m4a": "audio/mp4", ".aac": "audio/aac", ".opus": "audio/ogg",
    }.get(suffix, "application/octet-stream")
