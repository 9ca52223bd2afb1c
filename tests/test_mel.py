"""Whisper's mel features in one fixed order of float32 operations (agl.speech.mel): the same
bits whatever BLAS does. Was: OpenBLAS's sgemm gave a demo clip 0.24650028 with two threads and
0.24649982 with one, so speech.csv's 3-decimal probability named the core count."""

from __future__ import annotations

import numpy as np
import pytest

from agl.speech.mel import FixedOrderFilters, fix_mel_order


def _sequential(filters: np.ndarray, power: np.ndarray) -> np.ndarray:
    """The definition, one scalar float32 operation at a time, bins in order."""
    out = np.zeros((filters.shape[0], power.shape[1]), dtype=np.float32)
    for r in range(filters.shape[0]):
        for t in range(power.shape[1]):
            acc = np.float32(0)
            for k in range(filters.shape[1]):
                if filters[r, k]:
                    acc = np.float32(acc + np.float32(filters[r, k] * power[k, t]))
            out[r, t] = acc
    return out


def test_the_product_is_the_sequential_sum_bit_for_bit():
    rng = np.random.default_rng(7)
    filters = rng.random((6, 40), dtype=np.float32) * (rng.random((6, 40)) < 0.3)
    power = (rng.random((40, 9), dtype=np.float32) * 1e3).astype(np.float32)
    got = FixedOrderFilters(filters) @ power
    assert got.dtype == np.float32 and got.shape == (6, 9)
    assert np.array_equal(got, _sequential(filters, power))
    assert np.allclose(got, filters @ power, rtol=1e-5)  # the same product as the BLAS one
    batched = FixedOrderFilters(filters) @ np.stack([power, power[:, ::-1]])
    assert np.array_equal(batched[0], got) and np.array_equal(batched[1], _sequential(filters, power[:, ::-1]))


def test_whispers_features_do_not_depend_on_the_blas_thread_count():
    from agl.speech.listen import SpeechConfig
    from agl.speech.model import pin_kernels

    # Importing faster_whisper loads CTranslate2, which reads its kernels once per process: the
    # speech tests that share this worker must find the ones they pin (the default).
    pin_kernels(SpeechConfig().cpu_isa)
    feature_extractor = pytest.importorskip("faster_whisper.feature_extractor")
    from threadpoolctl import threadpool_limits

    audio = (np.random.default_rng(3).standard_normal(16000 * 30) * 0.1).astype(np.float32)
    model = type("Model", (), {})()
    model.feature_extractor = feature_extractor.FeatureExtractor(feature_size=80)
    blas = model.feature_extractor(audio)
    extractor = fix_mel_order(fix_mel_order(model)).feature_extractor  # once, however often asked
    assert type(extractor.mel_filters) is FixedOrderFilters
    runs = []
    for threads in (1, 2, 4):
        with threadpool_limits(threads, user_api="blas"):
            runs.append(extractor(audio))
    assert all(np.array_equal(runs[0], r) for r in runs[1:])
    assert np.allclose(runs[0], blas, atol=1e-5)  # Whisper sees the features it was trained on
