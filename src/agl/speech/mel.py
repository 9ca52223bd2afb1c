"""Whisper's log-mel features with the same bits on every machine and thread count.

faster-whisper applies the mel filterbank to the power spectrum with `filters @ power`:
numpy hands that to OpenBLAS, whose sgemm rounds differently with its thread count (capped
by the core count) and its CPU kernels. On a 2-core EPYC, a demo clip's top language
probability was 0.24650028 with two BLAS threads and 0.24649982 with one: both sides of the
3-decimal edge that speech.csv writes, so the tracked bytes named the machine, not the data.

Here each mel band sums its few nonzero FFT bins in bin order, one float32 multiply and one
float32 add at a time (numpy's elementwise operations, correctly rounded, no fused
multiply-add): the same bits anywhere. Each FFT bin feeds at most two of Whisper's
triangular bands, so the product costs about a millisecond a 30 s window.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Named in the heard-clips cache key (agl.speech.heard): a change of the arithmetic here is a
# change of what a clip is heard as.
MEL_ARITHMETIC = "fixed-order-float32-v1"


class FixedOrderFilters:
    """A mel filterbank (bands x FFT bins) whose `@` is the fixed-order product above."""

    def __init__(self, filters: Any):
        self.filters = np.asarray(filters, dtype=np.float32)
        self._bins = [(k, rows) for k in range(self.filters.shape[1])
                      if (rows := np.flatnonzero(self.filters[:, k])).size]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.filters.shape

    def __matmul__(self, power: np.ndarray) -> np.ndarray:
        power = np.asarray(power, dtype=np.float32)
        out = np.zeros(power.shape[:-2] + (self.filters.shape[0], power.shape[-1]), dtype=np.float32)
        for k, rows in self._bins:
            out[..., rows, :] += self.filters[rows, k, None] * power[..., k, None, :]
        return out


def fix_mel_order(model: Any) -> Any:
    """`model` (a faster_whisper.WhisperModel) computing its features in the fixed order."""
    extractor = model.feature_extractor
    if not isinstance(extractor.mel_filters, FixedOrderFilters):
        extractor.mel_filters = FixedOrderFilters(extractor.mel_filters)
    return model
