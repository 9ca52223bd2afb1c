"""Silero VAD without torch: the silero-vad package's ONNX model, run as the package runs it.

The tag and perturb@mask_speech stages ask where a 16 kHz clip has speech. The silero-vad
package answers with its ONNX export, but importing the package imports torch (2 to 2.5 s of
CPU per process) for the glue around ONNX Runtime: a 512-sample window with the last 64
samples of the one before, the model's state carried from window to window, and the rules
that turn per-window probabilities into segments. This module is that glue in numpy, as the
package's `OnnxWrapper` and `get_speech_timestamps` (silero-vad 6.2, MIT) do it, for the
settings agl uses (no cap on a segment's length). tests/test_vad.py checks the segments
against the package's own, sample for sample, on the demo's clips and real recordings.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

RATE = 16000  # the model's rate; callers resample to it
WINDOW = 512  # samples per probability at 16 kHz
CONTEXT = 64  # samples of the previous window prepended to each
MODEL_FILE = "silero_vad.onnx"  # the package's default ONNX export (opset 16)

_SESSIONS: list[Any] = []


def model_path() -> Path:
    """The ONNX file inside the installed silero-vad package (found without importing it:
    its __init__ imports torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("silero-vad is not installed: pip install silero-vad")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / MODEL_FILE


def _session():
    if not _SESSIONS:
        import onnxruntime  # lazy: only the stages that listen for speech load it

        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1  # as the package sets them: its numbers, on any core count
        opts.intra_op_num_threads = 1
        _SESSIONS.append(onnxruntime.InferenceSession(str(model_path()), sess_options=opts))
    return _SESSIONS[0]


def speech_probs(audio: np.ndarray) -> list[float]:
    """One speech probability per 512-sample window of 16 kHz mono float32 `audio` (the last
    window zero-padded), the model's state carried across windows."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    session = _session()
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, CONTEXT), dtype=np.float32)
    rate = np.array(RATE, dtype=np.int64)
    probs = []
    for start in range(0, x.size, WINDOW):
        chunk = x[start:start + WINDOW]
        if chunk.size < WINDOW:
            chunk = np.pad(chunk, (0, WINDOW - chunk.size))
        frame = np.concatenate([context, chunk[None, :]], axis=1)
        out, state = session.run(None, {"input": frame, "state": state, "sr": rate})
        context = frame[:, -CONTEXT:]
        probs.append(float(out.reshape(-1)[0]))
    return probs


def speech_timestamps(audio: np.ndarray, *, threshold: float = 0.5, min_speech_ms: int = 250,
                      min_silence_ms: int = 100, pad_ms: int = 30,
                      return_seconds: bool = False) -> list[dict[str, float]]:
    """Speech segments of 16 kHz mono `audio` as [{"start", "end"}] in samples (or seconds,
    rounded to 0.1 s as the package rounds them): `get_speech_timestamps` with no maximum
    segment length, its defaults for the rest."""
    probs = speech_probs(audio)
    n = int(np.asarray(audio).size)
    min_speech = RATE * min_speech_ms / 1000
    min_silence = RATE * min_silence_ms / 1000
    pad = RATE * pad_ms / 1000
    neg_threshold = max(threshold - 0.15, 0.01)  # hysteresis: speech ends below this
    speeches: list[dict[str, float]] = []
    current: dict[str, float] = {}
    triggered, temp_end = False, 0
    for i, p in enumerate(probs):
        sample = WINDOW * i
        if p >= threshold and temp_end:
            temp_end = 0  # speech came back before the silence was long enough
        if p >= threshold and not triggered:
            triggered, current = True, {"start": sample}
            continue
        if p < neg_threshold and triggered:
            temp_end = temp_end or sample
            if sample - temp_end < min_silence:
                continue
            current["end"] = temp_end
            if current["end"] - current["start"] > min_speech:
                speeches.append(current)
            current, temp_end, triggered = {}, 0, False
    if current and n - current["start"] > min_speech:
        current["end"] = n
        speeches.append(current)
    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - pad))
        if i != len(speeches) - 1:
            gap = speeches[i + 1]["start"] - speech["end"]
            if gap < 2 * pad:  # two segments closer than their padding meet halfway
                speech["end"] += int(gap // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - gap // 2))
            else:
                speech["end"] = int(min(n, speech["end"] + pad))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - pad))
        else:
            speech["end"] = int(min(n, speech["end"] + pad))
    if return_seconds:
        for speech in speeches:
            speech["start"] = max(round(speech["start"] / RATE, 1), 0)
            speech["end"] = min(round(speech["end"] / RATE, 1), n / RATE)
    return speeches
