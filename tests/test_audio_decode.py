"""agl.core.audio: the one decoder and resampler gives, bit for bit, the samples each caller
always had (the outputs pinned in dvc.lock depend on it)."""

from __future__ import annotations

from math import gcd

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import resample_poly

from agl.core.audio import decode, decode_mono, load_mono, resample


@pytest.fixture(scope="module")
def mp3s(tmp_path_factory):
    """A 16 kHz mono MP3 (the demo set's kind, where rewinding changes the decoded samples)
    and a 44.1 kHz stereo one (AGL1K's kind)."""
    folder = tmp_path_factory.mktemp("mp3")
    rng = np.random.default_rng(7)
    noise = (rng.standard_normal((3 * 44100, 2)) * 0.1).astype(np.float32)
    sf.write(folder / "mono16k.mp3", noise[: 3 * 16000, 0], 16000, format="MP3")
    sf.write(folder / "stereo44k.mp3", noise, 44100, format="MP3")
    return [folder / "mono16k.mp3", folder / "stereo44k.mp3"]


def test_decode_is_soundfile_read(mp3s):
    for path in mp3s:
        expected, sr = sf.read(str(path), dtype="float32", always_2d=True)
        data, rate = decode(path)
        assert rate == sr and data.dtype == np.float32 and np.array_equal(data, expected)
        mono, rate = decode_mono(path)
        assert np.array_equal(mono, expected.mean(axis=1))


def test_load_mono_reads_without_rewinding_and_resamples_polyphase(mp3s):
    for path in mp3s:
        with sf.SoundFile(str(path)) as f:
            native = f.samplerate
            straight = f.read(frames=int(2.5 * native), dtype="float32", always_2d=True).mean(axis=1)
        g = gcd(native, 24000)
        expected = resample_poly(straight, 24000 // g, native // g).astype(np.float32)
        got = load_mono(path, 24000, max_seconds=2.5)
        assert got.dtype == np.float32 and got.flags.c_contiguous and np.array_equal(got, expected)
        assert np.array_equal(load_mono(path, native, 2.5), straight)  # same rate: no filter


def test_resample_works_per_channel_along_the_first_axis():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4410, 2)).astype(np.float32)
    both = resample(x, 44100, 16000)
    assert both.shape == (1600, 2) and both.dtype == np.float32
    for c in range(2):
        assert np.array_equal(both[:, c], resample(x[:, c], 44100, 16000))
    assert resample(x, 16000, 16000) is x
