"""agl.core.vad: silero's ONNX VAD run without torch gives the silero-vad package's segments,
sample for sample and in seconds, on real recordings (the demo's clips: test_demo.py), and
the stages that use it never import torch for it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import subprocess_env

from agl.core.audio import decode_mono, resample
from agl.core.vad import RATE, model_path, speech_probs, speech_timestamps


def test_real_recordings_give_the_package_segments(real_mp3s):
    torch = pytest.importorskip("torch")
    from silero_vad import get_speech_timestamps, load_silero_vad

    if not real_mp3s:
        pytest.skip("no real MP3s under ../shared/data/agl1k/archive (tests/helpers.py)")
    model = load_silero_vad(onnx=True)
    assert model_path().is_file()
    segments = 0
    for path in real_mp3s:
        mono, sr = decode_mono(path, 60.0)
        x = resample(mono, sr, RATE)
        # The tag stage's default, and thresholds low enough to hear something in these two
        # recordings (a blackbird, a street), which have no speech.
        for threshold in (0.5, 0.1, 0.05):
            ours = speech_timestamps(x, threshold=threshold)
            assert ours == get_speech_timestamps(torch.from_numpy(x), model, threshold=threshold,
                                                 sampling_rate=RATE), (path.name, threshold)
            if threshold == 0.1:  # seconds are the samples divided, once is enough
                seconds = speech_timestamps(x, threshold=threshold, return_seconds=True)
                assert seconds == get_speech_timestamps(torch.from_numpy(x), model, threshold=threshold,
                                                        sampling_rate=RATE, return_seconds=True)
            segments += len(ours)
    assert segments > 0  # something was heard, so the comparison compared segments


def test_edges_silence_and_a_clip_shorter_than_a_window():
    assert speech_probs(np.zeros(0, np.float32)) == [] and speech_timestamps(np.zeros(0, np.float32)) == []
    assert len(speech_probs(np.zeros(700, np.float32))) == 2  # the last window zero-padded
    assert speech_timestamps(np.zeros(RATE * 3, np.float32)) == []


def test_the_vad_stages_do_not_import_torch():
    code = ("import sys, numpy as np\n"
            "from agl.counterfactual.perturb import speech_segments\n"
            "from agl.curation.tagging import SpeechDetector\n"
            "x = np.random.default_rng(0).standard_normal(32000).astype(np.float32) * 0.1\n"
            "speech_segments(x, 16000); SpeechDetector().speech_seconds(x)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("value", ["loud", 1.5, 0, -0.2, None])
def test_a_threshold_that_is_not_a_probability_is_one_line_naming_the_key(value):
    """`tag.vad_threshold: loud` once failed inside the VAD with a TypeError traceback, and
    `perturb.mask_speech.vad_threshold: 1.5` masked nothing without a word."""
    from agl.core.checks import check_params
    from agl.counterfactual.perturb import parse_perturb
    from agl.curation.tagging import TagConfig
    from agl.errors import AglError

    with pytest.raises(AglError, match=r"^params.yaml tag.vad_threshold: .* strictly between 0 and 1"):
        check_params("tag", {"speech": "vad", "vad_threshold": value})  # the stage's check (_params.load)
    with pytest.raises(AglError, match=r"perturb.mask_speech.vad_threshold: .* strictly between 0 and 1"):
        check_params("perturb", {"mask_speech": {"kind": "mask_speech", "vad_threshold": value}})
    with pytest.raises(AglError, match="vad_threshold"):
        TagConfig.from_params({"vad_threshold": value})
    with pytest.raises(AglError, match="vad_threshold"):
        parse_perturb({"mask_speech": {"kind": "mask_speech", "vad_threshold": value}})
