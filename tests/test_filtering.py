"""The filter: real MP3s pass, the demo's bad clips fail for the right reason, bad files are rows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from agl.curation.filtering import FilterConfig, filter_clip, run_filter
from agl.dataset.passed import passed_keys
from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]


def write_mp3(path: Path, x: np.ndarray, sr: int = 16_000) -> Path:
    import soundfile as sf

    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.clip(x, -1, 1).astype(np.float32), sr, format="MP3")
    return path


def test_real_mp3s_pass_in_two_processes(real_mp3s):
    items = [(p.parent.name, p) for p in real_mp3s]
    run = run_filter(items, FilterConfig(), jobs=2)
    assert run.jobs == 2
    assert [r.key for r in run.results] == [k for k, _ in items]  # order kept
    assert all(r.passed and r.status == "ok" and r.reason == "" for r in run.results)
    by_key = {r.key: r for r in run.results}
    assert by_key["aporee_5201_6631"].seconds == pytest.approx(140.4, abs=0.5)
    assert by_key["aporee_26839_30948"].channels == 2
    one = run_filter(items, FilterConfig(), jobs=1)
    assert [r.rms_dbfs for r in one.results] == [r.rms_dbfs for r in run.results]


def test_corrupt_missing_and_empty_files_are_rows(tmp_path, real_mp3s):
    bad = tmp_path / "bad.mp3"
    bad.write_bytes(b"this is not audio" * 100)
    truncated = tmp_path / "truncated.mp3"
    truncated.write_bytes(real_mp3s[0].read_bytes()[:200])
    items = [("good", real_mp3s[0]), ("bad", bad), ("gone", tmp_path / "nope.mp3"),
             ("cut", truncated)]
    run = run_filter(items, FilterConfig(), jobs=2)
    rows = {r.key: r for r in run.results}
    assert rows["good"].passed
    assert rows["bad"].status == "unreadable" and not rows["bad"].passed
    assert rows["bad"].error and "\n" not in rows["bad"].error
    assert rows["gone"].status == "missing" and rows["gone"].reason == "missing"
    assert not rows["cut"].passed  # too short to decode or to measure: never a silent pass
    summary = run.summary(FilterConfig())
    assert summary["clips"] == 4 and summary["passed"] == 1
    assert summary["failed_by_reason"]["unreadable"] >= 1
    assert summary["failed_by_reason"]["missing"] == 1


@pytest.mark.parametrize(
    ("signal", "reason"),
    [
        ("quiet", "near_silence"),
        ("clipped", "clipping"),
        ("white", "flat_noise"),
        ("tone", "steady"),
    ],
)
def test_each_threshold_fails_for_its_reason(tmp_path, signal, reason):
    rng = np.random.default_rng(1)
    sr, n = 16_000, 16_000 * 12
    t = np.arange(n) / sr
    burst = np.sin(2 * np.pi * 440 * t) * (np.sin(2 * np.pi * 3 * t) > 0)  # a pulsed tone
    x = {
        "quiet": 10 ** (-75 / 20) * burst,
        "clipped": 4.0 * burst,
        "white": rng.normal(0, 0.1, n),
        # 40 periods per 512-sample frame at 16 kHz: every ACI frame identical.
        "tone": 0.3 * np.sin(2 * np.pi * (40 * sr / 512) * t),
    }[signal]
    result = filter_clip(signal, write_mp3(tmp_path / f"{signal}.mp3", x, sr), FilterConfig())
    assert result.status == "ok" and not result.passed
    assert reason in result.reason.split(";"), result.detail


def test_demo_bad_clips_fail_for_the_right_reason(demo_data):
    out = demo_data  # read only: the session's demo set (conftest)
    truth = json.loads((out / "demo_truth.json").read_text())["clips"]
    from agl.curation.filtering import filter_manifest

    run = filter_manifest(out / "manifest.csv", out / "audio", FilterConfig(), jobs=2)
    code = {"silence": "near_silence", "clipping": "clipping", "flat_noise": "flat_noise"}
    for r in run.results:
        intent = truth[r.key]["expected_filter_failure"]
        if intent is None:
            assert r.passed, (r.key, r.detail)
        else:
            assert not r.passed and r.reason.split(";")[0] == code[intent], (r.key, r.detail)
    assert sum(not r.passed for r in run.results) == sum(
        v["expected_filter_failure"] is not None for v in truth.values())


def test_config_from_params_names_bad_keys():
    params = yaml.safe_load((REPO / "params.yaml").read_text())["filter"]
    cfg = FilterConfig.from_params(params)
    assert cfg.flatness_band_hz == tuple(params["flatness_band_hz"])
    with pytest.raises(AglError, match="unknown key.*min_rms"):
        FilterConfig.from_params({"min_rms": -60})
    with pytest.raises(AglError, match="jobs"):
        FilterConfig.from_params({"jobs": 0})
    with pytest.raises(AglError, match="max_flatness"):
        FilterConfig.from_params({"max_flatness": "high"})


def test_stage_writes_table_and_summary(tmp_path, real_mp3s, agl1k_manifest):
    from agl.dataset.manifest import load_manifest, write_manifest

    with pytest.warns(UserWarning):
        frame = load_manifest(agl1k_manifest)
    keys = [p.parent.name for p in real_mp3s] + ["aporee_1_1"]
    frame = frame[frame["key"].isin(keys[:2])].copy()
    broken = frame.iloc[[0]].assign(key="aporee_1_1", mp3name="broken.mp3")
    frame = pd.concat([frame, broken])
    write_manifest(frame, tmp_path / "manifest.csv")
    for p in real_mp3s:
        shutil.copytree(p.parent, tmp_path / "audio" / p.parent.name)
    (tmp_path / "audio" / "aporee_1_1").mkdir()
    (tmp_path / "audio" / "aporee_1_1" / "broken.mp3").write_bytes(b"\x00" * 5000)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"filter": {"jobs": 2}}))
    out, summary = tmp_path / "build" / "filter.csv", tmp_path / "build" / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "stages" / "filter.py"), "--manifest",
         str(tmp_path / "manifest.csv"), "--audio-root", str(tmp_path / "audio"), "--out",
         str(out), "--summary", str(summary), "--params", str(params)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out, dtype={"key": str})
    assert list(table["key"]) == list(frame["key"])
    assert sorted(passed_keys(out)) == sorted(keys[:2])
    assert table.set_index("key").at["aporee_1_1", "status"] == "unreadable"
    s = json.loads(summary.read_text())
    assert s["passed"] == 2 and s["failed_by_reason"] == {"unreadable": 1}
    assert "2 of 3 clip(s) pass" in proc.stderr


def test_cli_filter_and_bad_input(tmp_path, real_mp3s, agl1k_manifest, capsys):
    from agl.cli import main
    from agl.dataset.manifest import load_manifest, write_manifest

    with pytest.warns(UserWarning):
        frame = load_manifest(agl1k_manifest)
    write_manifest(frame[frame["key"] == real_mp3s[0].parent.name], tmp_path / "m.csv")
    args = ["filter", "--manifest", str(tmp_path / "m.csv"), "--audio-root",
            str(real_mp3s[0].parents[1]), "--out", str(tmp_path / "f.csv"), "--jobs", "1",
            "--params", str(tmp_path / "absent.yaml")]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["passed"] == 1
    (tmp_path / "p.yaml").write_text("filter: {min_rms: 3}\n")
    args[-1] = str(tmp_path / "p.yaml")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) min_rms" in err and len(err.strip().splitlines()) == 1
