"""Sound generators for the SYNTHETIC demo set (agl.dataset.demo): each returns mono float64 at unit RMS.

None of this is a recording. Every generator is a small, explainable signal model chosen so
that a later stage reacts to it for the right reason: formant-synthesised vowel sequences with
syllabic amplitude modulation (speech-like), frequency-swept chirps (birdsong-like), low-passed
noise with passing-car swells (traffic-like), band-passed noise with wave envelopes
(surf-like), and so on. All randomness comes from the `numpy.random.Generator` passed in, so a
seed fixes every sample.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Generator = Callable[[np.random.Generator, int, int], np.ndarray]

# Vowel formants (F1, F2, F3) in Hz, after Peterson & Barney's adult averages.
_VOWELS: tuple[tuple[float, float, float], ...] = (
    (730.0, 1090.0, 2440.0),  # a
    (530.0, 1840.0, 2480.0),  # e
    (270.0, 2290.0, 3010.0),  # i
    (570.0, 840.0, 2410.0),  # o
    (300.0, 870.0, 2240.0),  # u
)


def unit_rms(x: np.ndarray) -> np.ndarray:
    rms = float(np.sqrt(np.mean(x**2)))
    return x / rms if rms > 0 else x


def _lowpass(x: np.ndarray, sr: int, hz: float, order: int = 4) -> np.ndarray:
    from scipy.signal import butter, sosfilt

    return sosfilt(butter(order, hz, btype="low", fs=sr, output="sos"), x)


def _highpass(x: np.ndarray, sr: int, hz: float, order: int = 4) -> np.ndarray:
    from scipy.signal import butter, sosfilt

    return sosfilt(butter(order, hz, btype="high", fs=sr, output="sos"), x)


def _bandpass(x: np.ndarray, sr: int, lo: float, hi: float, order: int = 4) -> np.ndarray:
    from scipy.signal import butter, sosfilt

    return sosfilt(butter(order, (lo, hi), btype="band", fs=sr, output="sos"), x)


def _coloured(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    """Noise with power falling as 1/f**exponent, shaped in the frequency domain."""
    from scipy.fft import irfft, next_fast_len, rfft

    size = next_fast_len(n, real=True)  # an awkward length can make the FFT 10x slower
    spec = rfft(rng.standard_normal(size))
    f = np.arange(spec.size, dtype=float)
    f[0] = 1.0
    return unit_rms(irfft(spec / f ** (exponent / 2), size)[:n])


def _pink(rng: np.random.Generator, n: int) -> np.ndarray:
    """1/f noise: natural ambiences are close to pink."""
    return _coloured(rng, n, 1.0)


def _brown(rng: np.random.Generator, n: int) -> np.ndarray:
    return _coloured(rng, n, 2.0)


def _smooth_envelope(rng: np.random.Generator, n: int, sr: int, hz: float) -> np.ndarray:
    """A slowly wandering positive envelope (random values interpolated at `hz`)."""
    points = max(2, int(n / sr * hz) + 2)
    knots = rng.uniform(0.3, 1.0, points)
    return np.interp(np.arange(n), np.linspace(0, n - 1, points), knots)


def _resonator(x: np.ndarray, sr: int, freq: float, bandwidth: float) -> np.ndarray:
    """A two-pole formant resonator (Klatt's), unit gain at DC."""
    from scipy.signal import lfilter

    r = np.exp(-np.pi * bandwidth / sr)
    a1, a2 = -2 * r * np.cos(2 * np.pi * freq / sr), r * r
    return lfilter([1 + a1 + a2], [1, a1, a2], x)


def speech(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Speech-like babble of one talker: phrases of CV syllables at 3-5 syllables per second.

    The source is a glottal pulse train following a pitch contour (phrase declination and a
    fall within each syllable) with a -12 dB/octave tilt; each syllable is a short fricative
    burst and a vowel through a cascade of three formant resonators (Klatt's synthesiser);
    phrases are separated by pauses.
    """
    from scipy.signal import lfilter

    out = np.zeros(n)
    base_f0 = rng.uniform(100.0, 210.0)
    t = 0
    while t < n - sr // 2:
        syllables = int(rng.integers(4, 12))
        phrase = []
        for i in range(syllables):
            dur = int(sr / rng.uniform(3.0, 5.0))
            f0_start = base_f0 * (1.15 - 0.25 * i / syllables) * rng.uniform(0.95, 1.1)
            f0 = np.linspace(f0_start, f0_start * rng.uniform(0.85, 1.0), dur)
            pulses = np.diff(np.floor(np.cumsum(f0) / sr), prepend=0.0)
            source = lfilter([1.0], [1.0, -0.97], lfilter([1.0], [1.0, -0.97], pulses))
            f1, f2, f3 = _VOWELS[int(rng.integers(len(_VOWELS)))]
            jitter = rng.uniform(0.92, 1.08)
            vowel = source
            for freq, bw in ((f1 * jitter, 80.0), (f2 * jitter, 100.0), (f3, 150.0)):
                vowel = _resonator(vowel, sr, freq, bw)
            # syllabic amplitude modulation: the 3-5 Hz envelope of running speech
            syl = unit_rms(vowel) * np.sin(np.pi * np.linspace(0, 1, dur)) ** 1.5
            consonant = int(dur * rng.uniform(0.1, 0.25))
            if rng.random() < 0.6:
                burst = _highpass(rng.standard_normal(consonant), sr, 2500.0) * 0.35
                syl[:consonant] = burst * np.hanning(consonant) + syl[:consonant] * 0.2
            phrase.append(syl)
        chunk = np.concatenate(phrase)
        end = min(n, t + chunk.size)
        out[t:end] += chunk[: end - t]
        t = end + int(sr * rng.uniform(0.25, 0.8))
    return unit_rms(_highpass(out, sr, 70.0, order=2))  # the pulse train's DC is not speech


def birdsong(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Phrases of frequency-swept whistles (2-6 kHz, 40-150 ms each) every few seconds."""
    out = np.zeros(n)
    t = int(sr * rng.uniform(0.1, 1.0))
    while t < n:
        for _ in range(int(rng.integers(3, 9))):
            if t >= n:
                break
            dur = int(sr * rng.uniform(0.04, 0.15))
            f = np.linspace(rng.uniform(2000, 3500), rng.uniform(3000, 6000), dur)
            f *= 1 + 0.05 * np.sin(2 * np.pi * rng.uniform(20, 60) * np.arange(dur) / sr)
            note = np.sin(2 * np.pi * np.cumsum(f) / sr) * np.hanning(dur)
            end = min(n, t + dur)
            out[t:end] += note[: end - t]
            t = end + int(sr * rng.uniform(0.02, 0.08))
        t += int(sr * rng.uniform(1.0, 4.0))
    return unit_rms(out)


def crickets(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """A 4-5 kHz carrier pulsed at ~30 Hz in chirps of a fifth of a second."""
    time = np.arange(n) / sr
    carrier = np.sin(2 * np.pi * rng.uniform(4000, 5000) * time)
    pulses = (np.sin(2 * np.pi * rng.uniform(25, 35) * time) > 0.3).astype(float)
    chirps = (np.sin(2 * np.pi * rng.uniform(1.2, 2.0) * time) > 0.4).astype(float)
    return unit_rms(_lowpass(carrier * pulses * chirps, sr, 6500.0, order=2))


def traffic(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """A low rumble (brown noise under 400 Hz) with cars passing every few seconds."""
    time = np.arange(n) / sr
    bed = _lowpass(_brown(rng, n), sr, 400.0)
    swell = np.full(n, 0.3)
    t = rng.uniform(0, 3)
    while t < time[-1]:
        width = rng.uniform(1.5, 4.0)
        swell += rng.uniform(0.6, 1.5) * np.exp(-(((time - t) / width) ** 2))
        t += rng.uniform(2.0, 7.0)
    tyres = _bandpass(rng.standard_normal(n), sr, 300.0, 2500.0)
    engine = np.sin(2 * np.pi * rng.uniform(40, 90) * time + 0.5 * np.sin(0.3 * time))
    return unit_rms(unit_rms(bed) * swell + 0.5 * unit_rms(tyres) * swell**2 + 0.3 * engine)


def surf(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Band-passed pink noise under a wave envelope with a 6-10 s period."""
    time = np.arange(n) / sr
    period = rng.uniform(6.0, 10.0)
    wave = np.maximum(0.0, np.sin(2 * np.pi * time / period + rng.uniform(0, 6))) ** 2
    return unit_rms(_bandpass(_pink(rng, n), sr, 150.0, 5000.0) * (0.2 + wave))


def stream(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Babbling water: many small bubbles (rising, decaying tones) over a band of noise."""
    bubbles = np.zeros(n)
    for start in np.flatnonzero(rng.random(n) < 40 / sr):
        dur = int(sr * rng.uniform(0.01, 0.04))
        time = np.arange(min(dur, n - start)) / sr
        freq = rng.uniform(600, 3000) * (1 + 8 * time)  # a bubble's pitch rises as it surfaces
        tone = np.sin(2 * np.pi * np.cumsum(freq) / sr) * np.exp(-time / (dur / sr / 4))
        bubbles[start : start + time.size] += rng.uniform(0.3, 1.0) * tone
    return unit_rms(unit_rms(bubbles) + 0.3 * _bandpass(_pink(rng, n), sr, 400.0, 3000.0))


def wind(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Gusts: low-passed noise whose loudness wanders over seconds."""
    return unit_rms(_lowpass(_pink(rng, n), sr, 800.0) * _smooth_envelope(rng, n, sr, 0.5))


def rain(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Drops (sparse clicks ringing at 1.5-4 kHz, varied in loudness) over a soft hiss."""
    drops = np.zeros(n)
    ring = np.arange(int(0.008 * sr)) / sr
    for start in np.flatnonzero(rng.random(n) < 60 / sr):
        tone = np.sin(2 * np.pi * rng.uniform(1500, 4000) * ring) * np.exp(-ring / 0.0015)
        end = min(n, start + ring.size)
        drops[start:end] += rng.uniform(0.1, 1.0) ** 2 * tone[: end - start]
    return unit_rms(unit_rms(drops) + 0.15 * _highpass(_pink(rng, n), sr, 800.0))


def music(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """A pentatonic melody of harmonic tones (ADSR envelopes) over a slower bass line."""
    scale = np.array([0, 2, 4, 7, 9, 12, 14, 16])
    root = rng.uniform(180, 300)
    out = np.zeros(n)
    melody_beat = rng.uniform(0.2, 0.45)
    for octave, beat, gain in ((1.0, melody_beat, 1.0), (0.25, 4 * melody_beat, 0.6)):
        t = 0
        while t < n:
            dur = int(sr * beat * rng.choice([1, 1, 2]))
            freq = root * octave * 2 ** (rng.choice(scale) / 12)
            time = np.arange(dur) / sr
            tone = sum(np.sin(2 * np.pi * k * freq * time) / k**1.5 for k in range(1, 6))
            attack = max(1, int(0.01 * sr))
            env = np.exp(-time / (0.6 * dur / sr + 1e-3))
            env[:attack] *= np.linspace(0, 1, attack)
            end = min(n, t + dur)
            out[t:end] += (tone * env)[: end - t] * gain
            t = end
    return unit_rms(out)


def bells(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Church-bell-like strikes: inharmonic partials with long exponential decays."""
    ratios = np.array([0.5, 1.0, 1.19, 1.5, 2.0, 2.52, 2.98])
    out = np.zeros(n)
    t = int(sr * rng.uniform(0, 1))
    base = rng.uniform(300, 600)
    while t < n:
        dur = min(n - t, int(sr * 5))
        time = np.arange(dur) / sr
        strike = sum(
            np.sin(2 * np.pi * base * r * time) * np.exp(-time / (3.5 / (1 + i)))
            for i, r in enumerate(ratios)
        )
        out[t : t + dur] += strike
        t += int(sr * rng.uniform(1.5, 3.5))
    return unit_rms(out)


def mains_hum(rng: np.random.Generator, n: int, sr: int, mains_hz: float = 50.0) -> np.ndarray:
    """Electrical hum at the local mains frequency and its odd harmonics."""
    time = np.arange(n) / sr
    return unit_rms(sum(np.sin(2 * np.pi * mains_hz * k * time) / k for k in (1, 3, 5, 7)))


def white_noise(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """Stationary full-band white noise: spectrally flat, with no structure at all."""
    return unit_rms(rng.standard_normal(n))


def room_tone(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """A quiet room's background: low-passed pink noise (mixed far below -60 dBFS)."""
    return unit_rms(_lowpass(_pink(rng, n), sr, 2000.0))


def ambience(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    """The background bed under most clips: pink noise, gently wandering in level."""
    return unit_rms(_pink(rng, n) * _smooth_envelope(rng, n, sr, 0.2))


GENERATORS: dict[str, Generator] = {
    "speech": speech,
    "birdsong": birdsong,
    "crickets": crickets,
    "traffic": traffic,
    "surf": surf,
    "stream": stream,
    "wind": wind,
    "rain": rain,
    "music": music,
    "bells": bells,
    "hum_50hz": lambda rng, n, sr: mains_hum(rng, n, sr, 50.0),
    "hum_60hz": lambda rng, n, sr: mains_hum(rng, n, sr, 60.0),
    "white_noise": white_noise,
    "room_tone": room_tone,
    "ambience": ambience,
}
