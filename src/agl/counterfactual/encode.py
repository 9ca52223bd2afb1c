"""A derived clip's file: its samples encoded as mp3 (the default), flac or wav, byte-deterministic.

agl.counterfactual.effects writes every perturbed clip of a derived dataset through `encode`
(params counterfactual.format).
"""

from __future__ import annotations

import io

import numpy as np

from agl.errors import AglError

MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def encode_mp3(x: np.ndarray, sr: int) -> bytes:
    """16-bit PCM into MP3 through libsndfile (LAME). Byte-deterministic for the same samples
    and libsndfile build (checked: two encodes, two processes, identical SHA-256), so a derived
    dataset keeps the original's container and the API sees the same kind of file."""
    import soundfile as sf

    if sr not in MP3_RATES:
        raise AglError(f"MP3 cannot hold {sr} Hz audio")
    pcm = np.round(np.clip(x, -1.0, 1.0) * 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, sr, format="MP3")
    return buf.getvalue()


FORMATS = ("mp3", "flac", "wav")


def encode(x: np.ndarray, sr: int, fmt: str) -> bytes:
    """The derived clip's file. mp3 (default): what every backend accepts (OpenAI's audio
    input takes only mp3 and wav), but libsndfile's LAME encodes at only ~6-30x real time;
    flac: lossless, ~40x faster to write, accepted by Gemini and the local backends; wav: no
    encoding at all, ~10 MB per stereo minute. All three are byte-deterministic."""
    if fmt == "mp3":
        return encode_mp3(x, sr)
    import soundfile as sf

    if fmt not in FORMATS:
        raise AglError(f"counterfactual.format '{fmt}': choose one of {', '.join(FORMATS)}")
    buf = io.BytesIO()
    pcm = np.round(np.clip(x, -1.0, 1.0) * 32767).astype(np.int16)
    sf.write(buf, pcm, sr, format=fmt.upper(), subtype="PCM_16")
    return buf.getvalue()
