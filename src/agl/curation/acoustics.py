"""Four low-level acoustic measures over a decoded signal: small pure functions over arrays.

Signals are float arrays in [-1, 1] (full scale = 1.0), as soundfile decodes them.

* `rms_dbfs`: root-mean-square level in dB relative to a full-scale square wave (a full-scale
  square wave is 0 dBFS, a full-scale sine -3.01 dBFS, digital silence -inf).
* `spectral_flatness`: Wiener entropy, the geometric over the arithmetic mean of the power
  spectrum within a band (default 100 Hz - 6 kHz), taken on the long-term spectrum (Welch's
  mean over 2048-sample Hann frames, 50% overlap). White noise gives ~1, a pure tone ~0, a
  linear chirp sweeping the whole band close to 1 (its long-term spectrum is flat), pink noise
  ~0.6. Why long-term and not the mean of per-frame flatnesses: per-frame periodogram bins are
  chi-squared, which caps white noise at exp(-Euler's gamma) = 0.56 and leaves almost no room
  between white noise and a real stream or surf recording. Why the band: an MP3 encoder's
  low-pass (7.3 kHz for 16 kHz audio, 16-19 kHz for 44.1 kHz) leaves empty bins that would
  make any noise look tonal; 6 kHz stays below it at every common sample rate.
* `clipping_ratio`: the share of samples whose magnitude reaches `level` of full scale.
* `acoustic_complexity_index`: Pieretti, Farina & Morri (2011), "A new methodology to infer
  the singing activity of an avian community: the Acoustic Complexity Index (ACI)",
  Ecological Indicators 11(3): 868-873. On an amplitude spectrogram I[k, t] (frequency bin k,
  temporal step t), for every bin and every temporal cluster j of consecutive steps:
  ACI[k, j] = sum_t |I[k, t] - I[k, t+1]| / sum_t I[k, t]; the index is the sum over clusters
  and bins. It is large for intensities that vary from step to step (bird song, speech) and
  near 0 for steady sounds (hum, a constant tone). Parameters (the values of the R package
  soundecology's `acoustic_complexity`, which implements the paper): FFT size 512 samples,
  Hamming window, no overlap, cluster length 5 s. A bin with no energy in a cluster (0/0)
  contributes 0. The total grows with duration and FFT size, so `aci_per_bin_cluster` also
  returns the mean per (bin, cluster), which is comparable across clips; the filter
  thresholds that mean. Because each bin's ratio is scale-free, near-empty bins (an MP3
  codec's quantisation noise above a pure tone) score like noise and push any signal towards
  ~0.5; the mean therefore counts only (bin, cluster) pairs within `floor_db` (filter default
  -60 dB) of the loudest pair. Pieretti's total is always reported without that floor. The DC
  bin is left out (an offset in the recording chain is not acoustic activity).
"""

from __future__ import annotations

import math

import numpy as np

# Defaults, documented above; every caller can override them (the filter takes them from params).
FLATNESS_N_FFT = 2048
FLATNESS_BAND_HZ = (100.0, 6000.0)
ACI_N_FFT = 512
ACI_CLUSTER_S = 5.0
CLIP_LEVEL = 0.999
# Below this mean band power (full scale = 1) the flatness of "digital silence" would be 0/0.
_SILENT_POWER = 1e-14


def rms_dbfs(x: np.ndarray) -> float:
    """RMS level in dBFS over all samples (any shape). -inf for digital silence or no samples."""
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0:
        return -math.inf
    ms = float(np.dot(x, x)) / x.size  # BLAS dot: a fraction of square-then-mean's time
    return 10.0 * math.log10(ms) if ms > 0 else -math.inf


def clipping_ratio(x: np.ndarray, level: float = CLIP_LEVEL) -> float:
    """Share of samples (over all channels) with |x| >= level. NaN for no samples."""
    x = np.asarray(x)
    if x.size == 0:
        return math.nan
    return float(np.count_nonzero(np.abs(x) >= level)) / x.size


def _frames(x: np.ndarray, n: int, hop: int) -> np.ndarray:
    """Non-padded frames of a 1-D signal as a (frames, n) view; empty if x is shorter than n."""
    if x.size < n:
        return np.empty((0, n), dtype=x.dtype)
    return np.lib.stride_tricks.sliding_window_view(x, n)[::hop]


def spectral_flatness(
    x: np.ndarray,
    sr: int,
    *,
    n_fft: int = FLATNESS_N_FFT,
    band_hz: tuple[float, float] = FLATNESS_BAND_HZ,
) -> float:
    """Flatness of the long-term power spectrum of a mono signal within `band_hz`, in [0, 1].

    The spectrum is Welch's mean over Hann frames of `n_fft` with 50% overlap; silent frames
    add nothing to it. NaN when nothing has energy (silence, or a signal shorter than a frame):
    flatness is undefined there, not 0 or 1.
    """
    from scipy import fft

    # float32 FFTs (scipy) halve the filter's time; the band's power is averaged in float64.
    x = np.asarray(x, dtype=np.float32)
    frames = _frames(x, n_fft, n_fft // 2)
    if len(frames) == 0:
        return math.nan
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    band = (freqs >= band_hz[0]) & (freqs <= min(band_hz[1], sr / 2))
    if not band.any():
        return math.nan
    spec = fft.rfft(frames * np.hanning(n_fft).astype(np.float32), axis=1)[:, band]
    power = (spec.real**2 + spec.imag**2).mean(axis=0, dtype=np.float64)
    mean = float(power.mean())
    if mean <= _SILENT_POWER * n_fft:
        return math.nan
    # log(0) (an exactly empty bin) would make the geometric mean 0; the floor is far below
    # any real bin, so a tone's flatness stays ~0 and noise's is unaffected.
    geo = float(np.exp(np.mean(np.log(np.maximum(power, mean * 1e-15)))))
    return geo / mean


def _aci_units(intensity: np.ndarray, steps_per_cluster: int) -> tuple[np.ndarray, np.ndarray]:
    """Per (bin, cluster): Pieretti's ratio Σ|ΔI| / ΣI (0 where ΣI = 0) and ΣI."""
    intensity = np.asarray(intensity, dtype=np.float64)
    ratios, energies = [], []
    for start in range(0, intensity.shape[1], steps_per_cluster):
        block = intensity[:, start : start + steps_per_cluster]
        if block.shape[1] < 2:  # one step has no difference: not a cluster
            continue
        diff = np.abs(np.diff(block, axis=1)).sum(axis=1)
        energy = block.sum(axis=1)
        ratios.append(np.divide(diff, energy, out=np.zeros_like(diff), where=energy > 0))
        energies.append(energy)
    if not ratios:
        return np.empty((intensity.shape[0], 0)), np.empty((intensity.shape[0], 0))
    return np.stack(ratios, axis=1), np.stack(energies, axis=1)


def aci_from_spectrogram(
    intensity: np.ndarray, steps_per_cluster: int, floor_db: float | None = None
) -> tuple[float, int]:
    """Pieretti's ACI of an amplitude spectrogram `intensity[bin, step]`: (total, units).

    Steps are cut into clusters of `steps_per_cluster` consecutive steps (a last, shorter
    cluster with at least 2 steps counts). `units` is the number of (bin, cluster) pairs that
    count: those with energy, and, with `floor_db`, within `floor_db` dB of the loudest pair.
    """
    ratios, energies = _aci_units(intensity, steps_per_cluster)
    active = energies > 0
    if floor_db is not None and active.any():
        active &= energies >= energies.max() * 10 ** (floor_db / 20)
    return float(ratios[active].sum()), int(active.sum())


def acoustic_complexity_index(
    x: np.ndarray, sr: int, *, n_fft: int = ACI_N_FFT, cluster_s: float = ACI_CLUSTER_S
) -> float:
    """Pieretti et al. (2011) ACI of a mono signal, summed over bins and clusters."""
    return aci_per_bin_cluster(x, sr, n_fft=n_fft, cluster_s=cluster_s)[0]


def _aci_spectrogram(x: np.ndarray, n_fft: int) -> np.ndarray | None:
    frames = _frames(np.asarray(x, dtype=np.float64), n_fft, n_fft)
    if len(frames) < 2:
        return None
    # Drop the DC bin: an offset in the recording chain is not acoustic activity.
    return np.abs(np.fft.rfft(frames * np.hamming(n_fft), axis=1)).T[1:]


def aci_per_bin_cluster(
    x: np.ndarray,
    sr: int,
    *,
    n_fft: int = ACI_N_FFT,
    cluster_s: float = ACI_CLUSTER_S,
    floor_db: float | None = None,
) -> tuple[float, float]:
    """(Pieretti's total ACI, the mean ACI per counted (bin, cluster) with `floor_db`).

    The total never uses the floor (it is the paper's index); the mean does, when given.
    The mean is NaN when nothing counts (silence, or shorter than two frames).
    """
    intensity = _aci_spectrogram(x, n_fft)
    if intensity is None:
        return math.nan, math.nan
    steps = max(2, round(cluster_s * sr / n_fft))
    ratios, energies = _aci_units(intensity, steps)
    if ratios.size == 0:
        return math.nan, math.nan
    total = float(ratios.sum())
    active = energies > 0
    if floor_db is not None and active.any():
        active &= energies >= energies.max() * 10 ** (floor_db / 20)
    units = int(active.sum())
    return total, (float(ratios[active].sum()) / units if units else math.nan)
