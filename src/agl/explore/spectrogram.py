"""A clip's picture for the explorer: a log-frequency spectrogram as a small PNG.

Drawn with numpy and zlib only (no matplotlib: one clip page asks for one or a few of
these, and the export draws hundreds). The whole clip is analysed in non-overlapping
~46 ms Hann frames, so no event between two picture columns is skipped: each column is the
mean power of the frames it covers. Rows are log-spaced bands from 40 Hz to 16 kHz (or the
Nyquist frequency), the way field recordings spread their sources (traffic low, birds high);
the colour spans the loudest 80 dB of the clip. The page draws its playhead over it, so the
picture's x axis is the clip's time from 0 to its end.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from agl.errors import AglError

WIDTH = 800  # columns at most (a short clip gets one per frame)
HEIGHT = 96
F_MIN_HZ, F_MAX_HZ = 40.0, 16000.0
DYNAMIC_RANGE_DB = 80.0
FRAME_S = 0.046
_BLOCK_FRAMES = 512  # frames transformed at once: bounds memory on an hour-long clip
# Dark to light (black, purple, red, orange, pale yellow): quiet is dark, loud is bright.
_ANCHORS = np.array([[0, 0, 4], [80, 18, 123], [182, 54, 121], [251, 136, 97], [252, 253, 191]],
                    dtype=float)


def _colour_table() -> np.ndarray:
    x = np.linspace(0, len(_ANCHORS) - 1, 256)
    return np.stack([np.interp(x, np.arange(len(_ANCHORS)), _ANCHORS[:, c]) for c in range(3)],
                    axis=1).round().astype(np.uint8)


_LUT = _colour_table()


def png(rgb: np.ndarray) -> bytes:
    """An (height, width, 3) uint8 image as PNG bytes (8-bit RGB, no filter, zlib)."""
    h, w, _ = rgb.shape
    raw = np.hstack([np.zeros((h, 1), dtype=np.uint8), rgb.reshape(h, w * 3)]).tobytes()

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6))
            + chunk(b"IEND", b""))


def band_power(x: np.ndarray, sr: int, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """(height, columns) mean power per log-frequency band and time column; row 0 = lowest."""
    n_fft = 1 << int(np.ceil(np.log2(max(sr * FRAME_S, 64))))
    if len(x) < n_fft:
        x = np.pad(x, (0, n_fft - len(x)))
    n_frames = len(x) // n_fft
    columns = min(width, n_frames)
    col_of_frame = (np.arange(n_frames) * columns) // n_frames
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    top = min(F_MAX_HZ, sr / 2)
    edges = np.geomspace(F_MIN_HZ, top, height + 1)
    # Bins per band; a band narrower than one bin takes the bin it falls in.
    lo = np.minimum(np.searchsorted(freqs, edges[:-1]), len(freqs) - 1)
    hi = np.maximum(np.searchsorted(freqs, edges[1:]), lo + 1)
    window = np.hanning(n_fft).astype(np.float32)
    sums = np.zeros((columns, height))
    counts = np.bincount(col_of_frame, minlength=columns).astype(float)
    for start in range(0, n_frames, _BLOCK_FRAMES):
        stop = min(start + _BLOCK_FRAMES, n_frames)
        frames = x[start * n_fft: stop * n_fft].reshape(stop - start, n_fft) * window
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
        cum = np.concatenate([np.zeros((len(power), 1)), np.cumsum(power, axis=1)], axis=1)
        per_band = (cum[:, hi] - cum[:, lo]) / (hi - lo)
        np.add.at(sums, col_of_frame[start:stop], per_band)
    return (sums / counts[:, None]).T


def image(power: np.ndarray) -> np.ndarray:
    """Band power as an RGB picture: loud bright, the top `DYNAMIC_RANGE_DB` dB, high
    frequencies at the top."""
    db = 10.0 * np.log10(power + 1e-12)
    level = np.clip((db - (db.max() - DYNAMIC_RANGE_DB)) / DYNAMIC_RANGE_DB, 0.0, 1.0)
    return _LUT[(level[::-1] * 255).round().astype(np.uint8)]


def spectrogram_png(path: Path, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """The PNG of one audio file; AglError (one line) if it cannot be read."""
    import soundfile as sf

    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (OSError, RuntimeError, sf.LibsndfileError) as exc:
        raise AglError(f"{path}: cannot decode ({str(exc).splitlines()[0][:120]})") from None
    if data.size == 0:
        raise AglError(f"{path}: no samples")
    return png(image(band_power(data.mean(axis=1), int(sr), width, height)))
