"""Each acoustic measure against signals with known answers, and on the two real MP3s."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agl.curation import acoustics

SR = 44_100
N_FFT = acoustics.ACI_N_FFT
STEPS = round(acoustics.ACI_CLUSTER_S * SR / N_FFT)


def seconds(s: float) -> np.ndarray:
    return np.arange(int(s * SR)) / SR


def aligned_tone(amplitude: float = 0.5, periods_per_frame: int = 12, s: float = 20.0):
    """A sine with a whole number of periods in every ACI frame: identical frames."""
    return amplitude * np.sin(2 * np.pi * (periods_per_frame * SR / N_FFT) * seconds(s))


def test_silence():
    x = np.zeros(SR * 10)
    assert acoustics.rms_dbfs(x) == -math.inf
    assert math.isnan(acoustics.spectral_flatness(x, SR))  # undefined, not 0 or 1
    assert acoustics.clipping_ratio(x) == 0.0
    total, mean = acoustics.aci_per_bin_cluster(x, SR)
    assert total == 0.0  # every bin is 0/0, which contributes nothing
    assert math.isnan(mean)  # and no (bin, cluster) has energy to average over


def test_full_scale_square_wave():
    # 441 Hz: exactly 100 samples per period, half +1, half -1.
    x = np.where((np.arange(SR * 10) % 100) < 50, 1.0, -1.0)
    assert acoustics.rms_dbfs(x) == pytest.approx(0.0, abs=1e-9)
    assert acoustics.clipping_ratio(x) == 1.0
    assert acoustics.spectral_flatness(x, SR) < 0.01  # harmonics only
    assert acoustics.clipping_ratio(0.5 * x) == 0.0


def test_white_noise():
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 0.1, SR * 30)
    assert acoustics.rms_dbfs(x) == pytest.approx(-20.0, abs=0.05)
    assert acoustics.spectral_flatness(x, SR) > 0.97
    assert acoustics.clipping_ratio(x) == 0.0
    # Non-overlapping frames of Gaussian noise give iid Rayleigh bin magnitudes X, for which
    # E|X - Y| / E X = 2 (1 - 1/sqrt 2); a cluster of m steps has m - 1 differences.
    expected = 2 * (1 - 1 / math.sqrt(2)) * (STEPS - 1) / STEPS
    assert acoustics.aci_per_bin_cluster(x, SR)[1] == pytest.approx(expected, abs=0.01)


def test_pure_tone():
    x = aligned_tone(0.5)
    assert acoustics.rms_dbfs(x) == pytest.approx(20 * math.log10(0.5 / math.sqrt(2)), abs=1e-3)
    assert acoustics.spectral_flatness(x, SR) < 1e-3
    assert acoustics.clipping_ratio(x) == 0.0
    total, norm = acoustics.aci_per_bin_cluster(x, SR)
    assert norm < 1e-4  # frames identical up to rounding: no change from step to step
    assert acoustics.acoustic_complexity_index(x, SR) == total
    # Leakage and rounding bins are scale-free: without a floor they would count like noise.
    assert acoustics.aci_per_bin_cluster(x, SR, floor_db=-60)[1] < 1e-4


def test_chirp():
    t = seconds(20.0)
    f0, f1 = 100.0, 6000.0
    x = 0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * 20.0) * t**2))
    assert acoustics.rms_dbfs(x) == pytest.approx(20 * math.log10(0.5 / math.sqrt(2)), abs=0.01)
    # Sweeping the whole band at constant speed leaves a flat long-term spectrum.
    assert acoustics.spectral_flatness(x, SR) > 0.5
    assert acoustics.clipping_ratio(x) == 0.0
    # Energy moves through the bins: far more complex than a steady tone.
    assert acoustics.aci_per_bin_cluster(x, SR)[1] > 0.2


def test_aci_from_spectrogram_by_hand():
    intensity = np.array([[1.0, 3.0, 1.0, 3.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    # One cluster of 4 steps: bin 0: (2 + 2 + 2) / 8; bin 1: 0; bin 2: 0/0, not counted.
    assert acoustics.aci_from_spectrogram(intensity, 4) == (0.75, 2)
    # Two clusters of 2 steps: bin 0: 2/4 + 2/4.
    assert acoustics.aci_from_spectrogram(intensity, 2) == (1.0, 4)
    # A last cluster of one step has no difference and is not counted.
    assert acoustics.aci_from_spectrogram(intensity[:, :3], 2) == (0.5, 2)
    # A floor 19 dB under the loudest pair (sum 8, floor 0.90) drops the quiet bin (sum 0.8).
    quiet = np.vstack([intensity[:2], [[0.1, 0.3, 0.1, 0.3]]])
    assert acoustics.aci_from_spectrogram(quiet, 4) == (1.5, 3)
    assert acoustics.aci_from_spectrogram(quiet, 4, floor_db=-19) == (0.75, 2)


def test_clipping_ratio_counts_level_and_channels():
    x = np.array([[0.5, 1.0], [-1.0, 0.9999], [0.2, 0.1], [1.2, -0.3]])
    assert acoustics.clipping_ratio(x, 0.999) == pytest.approx(4 / 8)
    assert math.isnan(acoustics.clipping_ratio(np.array([])))


def test_shorter_than_a_frame_is_undefined():
    x = np.ones(100) * 0.1
    assert math.isnan(acoustics.spectral_flatness(x, SR))
    assert math.isnan(acoustics.aci_per_bin_cluster(x, SR)[1])


def test_real_mp3s(real_mp3s):
    import soundfile as sf

    assert len(real_mp3s) == 2
    measured = {}
    for path in real_mp3s:
        data, sr = sf.read(path, dtype="float32", always_2d=True)
        mono = data.mean(axis=1)
        measured[path.parent.name] = (
            acoustics.rms_dbfs(mono),
            acoustics.spectral_flatness(mono, sr),
            acoustics.clipping_ratio(data),
            acoustics.aci_per_bin_cluster(mono, sr, floor_db=-60)[1],
        )
    # Essaouira (muezzin, gulls, surf) is louder than the Berlin courtyard blackbird.
    rms_e, flat_e, clip_e, aci_e = measured["aporee_26839_30948"]
    rms_b, flat_b, clip_b, aci_b = measured["aporee_5201_6631"]
    assert rms_e == pytest.approx(-19.2, abs=0.3)
    assert rms_b == pytest.approx(-27.6, abs=0.3)
    assert 0.03 < flat_e < 0.2 and 0.15 < flat_b < 0.45
    assert clip_e == 0.0 and clip_b == 0.0
    assert 0.55 < aci_e < 0.75 and 0.55 < aci_b < 0.75
