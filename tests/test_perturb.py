"""Each intervention on generated signals with a known answer, and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from agl.counterfactual import perturb
from agl.errors import AglError

SR = 16000


def _tone_mix(seconds: float = 4.0, sr: int = SR, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)
    return x.astype(np.float32)[:, None]


@pytest.mark.parametrize("colour", ["white", "pink", "brown"])
@pytest.mark.parametrize("snr_db", [-5.0, 0.0, 10.0, 30.0])
def test_noise_hits_the_target_snr(colour, snr_db):
    x = _tone_mix()
    y, sr = perturb.add_noise(x, SR, snr_db=snr_db, colour=colour, rng=np.random.default_rng(1))
    measured = 10 * np.log10(perturb.power(x) / perturb.power(y - x))
    assert sr == SR and y.shape == x.shape
    assert abs(measured - snr_db) < 0.5


def test_truncate_is_exact_to_the_sample():
    x = _tone_mix(3.0)
    for seconds in (0.5, 1.0, 2.3456):
        y, _ = perturb.truncate(x, SR, seconds=seconds)
        assert y.shape[0] == round(seconds * SR)
        assert np.array_equal(y, x[: y.shape[0]])
    assert perturb.truncate(x, SR, seconds=10.0)[0].shape[0] == x.shape[0]


def test_reversing_twice_gives_the_original():
    x = np.random.default_rng(2).standard_normal((SR, 2)).astype(np.float32)
    once, _ = perturb.reverse(x, SR)
    assert not np.array_equal(once, x)
    assert np.array_equal(perturb.reverse(once, SR)[0], x)


def _band_power(x: np.ndarray, sr: int, lo: float) -> float:
    spec = np.abs(np.fft.rfft(x[:, 0].astype(np.float64))) ** 2 / x.shape[0] ** 2
    f = np.fft.rfftfreq(x.shape[0], 1 / sr)
    return float(spec[f > lo].sum())


@pytest.mark.parametrize("codec", ["gsm", "mp3", "none"])
def test_telephone_band_removes_energy_above_3400_hz(codec):
    x = (0.2 * np.random.default_rng(3).standard_normal((3 * SR, 1))).astype(np.float32)
    y, sr = perturb.telephone(x, SR, codec=codec)
    assert sr == 8000 and y.shape[1] == 1
    before, after = _band_power(x, SR, 3400), _band_power(y, sr, 3400)
    assert 10 * np.log10(before / max(after, 1e-30)) >= 40
    assert _band_power(y, sr, 300) > 0.01 * _band_power(x, SR, 300)  # the band itself stays


def test_reverb_keeps_length_and_level():
    x = _tone_mix(2.0)
    y, sr = perturb.reverb(x, SR, rt60_s=0.6, room_m=(6.0, 5.0, 3.0), rng=np.random.default_rng(0))
    assert y.shape == x.shape and sr == SR
    assert abs(10 * np.log10(perturb.power(y) / perturb.power(x))) < 0.01
    assert not np.allclose(y, x)


def _speech_clip(seed: int = 0) -> tuple[np.ndarray, slice]:
    """3 s of a stream, 4 s of synthetic speech over it, 3 s of stream: 10 s at 16 kHz."""
    from agl.dataset import synth

    rng = np.random.default_rng(seed)
    n = 10 * SR
    bed = 0.05 * synth.unit_rms(synth.stream(rng, n, SR))
    talk = slice(3 * SR, 7 * SR)
    x = bed.copy()
    x[talk] += 0.3 * synth.unit_rms(synth.speech(rng, talk.stop - talk.start, SR))
    return x.astype(np.float32)[:, None], talk


@pytest.fixture(scope="module")
def speech_clip():
    x, talk = _speech_clip()
    segments = perturb.speech_segments(x, SR)
    return x, talk, segments


def _speech_share(x: np.ndarray) -> float:
    return sum(e - s for s, e in perturb.speech_segments(x, SR)) / x.shape[0]


@pytest.mark.parametrize("fill", ["background", "noise"])
def test_mask_speech_removes_speech_and_keeps_the_rest_bit_identical(speech_clip, fill):
    x, talk, segments = speech_clip
    assert _speech_share(x) > 0.25  # the VAD hears the speech before
    iv = perturb.parse_perturb({"m": {"kind": "mask_speech", "fill": fill, "seed": 4}})["m"][0]
    y, sr, info = perturb.apply(iv, x, SR, key="clip", segments=segments)
    assert y.shape == x.shape and sr == SR  # replaced, not cut
    assert _speech_share(y) < 0.05
    masked = perturb.merge(segments, x.shape[0], int(0.25 * SR))
    for s, e in perturb.complement(masked, x.shape[0]):
        assert np.array_equal(y[s:e], x[s:e])
    assert info["speech_s"] > 3.0


def test_keep_speech_silences_the_rest(speech_clip):
    x, talk, segments = speech_clip
    iv = perturb.parse_perturb({"k": {"kind": "keep_speech"}})["k"][0]
    y, _, _ = perturb.apply(iv, x, SR, key="clip", segments=segments)
    kept = perturb.merge(segments, x.shape[0], int(0.25 * SR))
    for s, e in kept:
        assert np.array_equal(y[s:e], x[s:e])
    for s, e in perturb.complement(kept, x.shape[0]):
        assert not y[s:e].any()


def test_same_params_same_samples(speech_clip):
    x, _, segments = speech_clip
    spec = {
        "n": {"kind": "noise", "snr_db": [0, 10], "seed": 7},
        "r": {"kind": "reverb", "rt60_s": 0.4, "seed": 7},
        "m": {"kind": "mask_speech", "fill": "noise", "seed": 7},
    }
    for levels in perturb.parse_perturb(spec).values():
        for iv in levels:
            a = perturb.apply(iv, x, SR, key="k1", segments=segments)[0]
            b = perturb.apply(iv, x, SR, key="k1", segments=segments)[0]
            assert np.array_equal(a, b)
            if iv.kind == "noise":  # another clip (or seed) draws other noise
                assert not np.array_equal(a, perturb.apply(iv, x, SR, key="k2")[0])


def test_graded_params_become_levels():
    levels = perturb.parse_perturb({"t": {"kind": "truncate", "seconds": [10, 2.5], "seed": 1}})
    assert [(iv.level, iv.value) for iv in levels["t"]] == [("seconds_2.5", 2.5), ("seconds_10", 10.0)]


@pytest.mark.parametrize(
    "section, expect",
    [
        ({"x": {"kind": "blur"}}, "perturb.x.kind: choose one of"),
        ({"x": {"kind": "noise", "snr": 3}}, "unknown key(s) snr"),
        ({"x": {"kind": "reverse", "seed": "a"}}, "perturb.x.seed"),
        ({"x": {"kind": "noise", "colour": ["pink"]}}, "perturb.x.colour: only snr_db"),
        ({"a/b": {"kind": "reverse"}}, "plain folder name"),
    ],
)
def test_bad_params_name_the_key(section, expect):
    with pytest.raises(AglError, match=None) as err:
        perturb.parse_perturb(section)
    assert expect in str(err.value)
