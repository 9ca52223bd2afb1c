"""The filter's duration checks (issue 14, point 4): a cut file and a blip do not pass."""

from __future__ import annotations

import numpy as np
import pytest

from agl.curation.filtering import FilterConfig, run_filter
from agl.errors import AglError

ESSAOUIRA = "aporee_26839_30948/20020207EssaouiraRempartsMuezzin.mp3"
ESSAOUIRA_S = 128.09496598639456  # the AGL1K manifest's mp3seconds


def test_truncated_and_too_short_clips_fail_with_their_reason(archive_dir, tmp_path):
    import soundfile as sf

    whole = archive_dir / ESSAOUIRA
    cut = tmp_path / "cut.mp3"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 4])
    blip = tmp_path / "blip.wav"
    t = np.arange(1600) / 16000  # 0.1 s
    sf.write(blip, 0.3 * np.sin(2 * np.pi * 440 * t), 16000)
    run = run_filter(
        [("whole", whole, ESSAOUIRA_S), ("cut", cut, ESSAOUIRA_S), ("blip", blip, 0.1), ("unknown_length", whole)],
        FilterConfig(),
        jobs=1,
    )
    rows = {r.key: r for r in run.results}
    assert rows["whole"].passed, rows["whole"].detail
    assert not rows["cut"].passed and rows["cut"].reason.split(";")[0] == "truncated"
    assert "manifest says 128.095 s" in rows["cut"].detail
    assert not rows["blip"].passed and "too_short" in rows["blip"].reason.split(";")
    assert rows["unknown_length"].passed
    summary = run.summary(FilterConfig())
    assert summary["failed_by_reason"]["truncated"] == 1
    assert summary["failed_by_reason"]["too_short"] == 1


def test_duration_params_are_validated():
    with pytest.raises(AglError, match="duration_tolerance"):
        FilterConfig.from_params({"duration_tolerance": 1.5})
    with pytest.raises(AglError, match="min_seconds"):
        FilterConfig.from_params({"min_seconds": -1})
    assert FilterConfig.from_params({"min_seconds": 0}).min_seconds == 0.0
