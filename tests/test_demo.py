"""The embedded SYNTHETIC demo set: layout, labelling, intent of each clip, determinism."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from helpers import subprocess_env

from agl.cli import main
from agl.dataset import demo
from agl.dataset.checksums import file_digest, read_lock
from agl.dataset.manifest import CATEGORY_COLUMNS, COLUMNS, clips, load_manifest
from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]


# The session's one demo set (conftest.demo_data, written once for all xdist workers), copied
# once per worker: test_rewrite_is_byte_identical_and_touches_nothing writes into it.
@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory, fresh_demo) -> Path:
    return fresh_demo(tmp_path_factory.mktemp("demo") / "data")


@pytest.fixture(scope="session")
def truth(demo_dir) -> dict:
    return json.loads((demo_dir / "demo_truth.json").read_text())["clips"]


def test_manifest_is_agl1k_layout_and_loads_cleanly(demo_dir):
    header = (demo_dir / "manifest.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == COLUMNS
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no header repair, nothing else to warn about
        frame = load_manifest(demo_dir / "manifest.csv")
    assert 24 <= len(frame) <= 40
    assert set(frame["continent"]) == {
        "Europe", "Asia", "Africa", "North America", "South America", "Oceania"
    }
    assert all(k.startswith("demo_") for k in frame["key"])
    assert frame["title"].str.startswith("SYNTHETIC").all()
    assert frame["description"].str.startswith("SYNTHETIC").all()
    # ordinary clips 8-18 s, the filters' failing ones 10-12 s, and one long clip of 130 s
    # (heard in 30-s windows by params.yaml's knn); ~514 s of audio in all
    long = frame["mp3seconds"] > 60
    assert frame.loc[~long, "mp3seconds"].between(8, 18.1).all()
    assert frame.loc[long, "mp3seconds"].round().tolist() == [demo.LONG_CLIP_S]
    assert abs(frame["mp3seconds"].sum() - 514) < 10


def test_audio_layout_duration_and_lock(demo_dir):
    frame = load_manifest(demo_dir / "manifest.csv")
    lock = read_lock(demo_dir / "lock.json")
    assert len(lock) == len(frame)
    for clip in clips(frame):
        path = demo_dir / "audio" / clip.relpath
        assert lock[clip.relpath] == file_digest(path)
        info = sf.info(path)
        assert (info.samplerate, info.channels) == (demo.SAMPLE_RATE, 1)
        assert info.duration == pytest.approx(clip.seconds, abs=0.05)


def test_every_filter_has_clips_that_fail_it_for_the_right_reason(truth):
    expected = {k: t["expected_filter_failure"] for k, t in truth.items()}
    assert {k: v for k, v in expected.items() if v} == demo.EXPECTED_FILTER_FAILURES
    kinds = list(demo.EXPECTED_FILTER_FAILURES.values())
    assert {kind: kinds.count(kind) for kind in set(kinds)} == {
        "silence": 2, "clipping": 2, "flat_noise": 2
    }
    for key, t in truth.items():
        m, fails = t["measured"], t["expected_filter_failure"]
        # each failing clip fails its own test only; the ordinary clips fail none
        assert (m["rms_dbfs"] < -60) == (fails == "silence"), key
        assert (m["clipped_fraction"] > 0.2) == (fails == "clipping"), key
        assert (m["spectral_flatness"] > 0.9) == (fails == "flat_noise"), key
        if fails is None:
            assert m["clipped_fraction"] == 0 and m["spectral_flatness"] < 0.5, key
            assert m["rms_dbfs"] > -30 and m["level_std_db"] > 1.0, key


def test_categories_follow_components(demo_dir, truth):
    frame = load_manifest(demo_dir / "manifest.csv").set_index("key")
    for key, t in truth.items():
        row = frame.loc[key]
        assert set(row[list(CATEGORY_COLUMNS)]) <= {0.0, 0.5, 1.0}
        speech = 1.0 if "speech" in t["foreground"] else 0.5 if t["speech_like"] else 0.0
        assert row["human_sounds"] == speech, key
        assert (key in demo.SPEECH_CLIPS) == t["speech_like"]
        music = "music" in t["foreground"] + t["background"] or "bells" in t["foreground"]
        assert (row["music"] > 0) == music, key
    assert 8 <= len(demo.SPEECH_CLIPS) <= len(truth) - 8  # some speech, some none


def test_silero_vad_hears_the_foreground_speech_and_nothing_else(demo_dir, truth):
    """The stages' VAD (agl.core.vad: silero's ONNX model without torch) on every demo clip:
    the silero-vad package's own segments, and speech only where the demo put it in front."""
    torch = pytest.importorskip("torch")
    from silero_vad import get_speech_timestamps, load_silero_vad

    from agl.core.vad import speech_timestamps

    model = load_silero_vad(onnx=True)
    frame = load_manifest(demo_dir / "manifest.csv")
    for clip in clips(frame):
        t = truth[clip.key]
        x, sr = sf.read(demo_dir / "audio" / clip.relpath, dtype="float32")
        assert sr == 16000
        spans = speech_timestamps(x)
        assert spans == get_speech_timestamps(torch.from_numpy(x), model, sampling_rate=sr), clip.key
        if t["speech_like"] and not t["speech_in_foreground"]:
            continue  # background speech: the docstring reports what VAD does there
        share = sum(s["end"] - s["start"] for s in spans) / x.size
        if t["speech_in_foreground"]:
            assert share > 0.1, (clip.key, share)
        else:
            assert share == 0.0, (clip.key, share)


def test_rewrite_is_byte_identical_and_touches_nothing(demo_dir, capsys):
    files = sorted(p for p in demo_dir.rglob("*") if p.is_file())
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    assert main(["demo", "--out", str(demo_dir)]) == 0
    assert "SYNTHETIC" in capsys.readouterr().err
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in demo_dir.rglob("*") if p.is_file()}
    assert after == before


def test_the_tag_audit_finds_exactly_the_planted_tags(demo_dir, truth):
    from agl.dataset.tag_audit import audit, summary_line

    rows = audit(clips(load_manifest(demo_dir / "manifest.csv")), demo_dir / "audio")
    assert {r.key for r in rows if r.tags} == set(demo.PLANTED_TAGS)
    assert {r.key for r in rows if r.places("tags")} == set(demo.PLANTED_TAGS)
    assert not any(r.places("name") for r in rows)
    assert {k for k, t in truth.items() if t.get("planted_tags")} == set(demo.PLANTED_TAGS)
    by_key = {r.key: {f.what for f in r.places("tags")} for r in rows}
    assert by_key[demo.key_of(13)] == {"city", "country", "coordinates"}
    assert by_key[demo.key_of(1)] == {"city"} and by_key[demo.key_of(25)] == {"country"}
    assert summary_line(rows).startswith(f"3 of {len(rows)} clips carry their place in their "
                                         "tags; 0 in their file name")


def test_download_on_an_unchanged_demo_set_is_a_quick_no_op(demo_dir, tmp_path, capsys, monkeypatch):
    from agl.dataset.croissant import write_card
    from agl.dataset.prepare import _audit_tags, _demo_matches_lock

    write_card(demo_dir)  # as `agl download` left it: an unchanged card is not written again
    _audit_tags(demo_dir, 25.0)  # and its tag audit, not written again either
    files = sorted(p for p in demo_dir.rglob("*") if p.is_file())
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    argv = ["download", "--params", str(tmp_path / "none.yaml"), "--dataset", "demo",
            "--out", str(demo_dir), "--summary", str(tmp_path / "summary.json")]

    def no_synthesis(*args, **kwargs):
        raise AssertionError("an unchanged demo set was synthesised again")

    # Quick whatever the machine's load: not one clip is made (the lock check is all it does).
    with monkeypatch.context() as m:
        m.setattr(demo, "generate", no_synthesis)
        m.setattr(demo, "_make_clip", no_synthesis)
        assert main(argv) == 0
    assert "already matches" in capsys.readouterr().err
    assert json.loads((tmp_path / "summary.json").read_text())["generated"] == 0
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in demo_dir.rglob("*") if p.is_file()}
    assert after == before
    # Any clip that differs from the lock (or another seed) means: generate again.
    clip = next(p for p in files if p.suffix == ".mp3")
    original = clip.read_bytes()
    try:
        clip.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        assert not _demo_matches_lock(demo_dir, demo.DEFAULT_SEED, {demo.key_of(i) for i in range(len(demo.RECIPES))})
    finally:
        clip.write_bytes(original)
    assert not _demo_matches_lock(demo_dir, demo.DEFAULT_SEED + 1, {demo.key_of(i) for i in range(len(demo.RECIPES))})


def test_another_seed_changes_the_audio_but_not_the_design():
    a = demo._make_clip(0, demo.RECIPES[0], 1, seed=1)
    b = demo._make_clip(0, demo.RECIPES[0], 2, seed=2)
    assert a.mp3 != b.mp3
    assert a.row["key"] == b.row["key"] and a.row["mp3name"] == b.row["mp3name"]
    again = demo._make_clip(0, demo.RECIPES[0], 1, seed=1)
    assert again.mp3 == a.mp3


def test_refuses_to_mix_into_a_folder_with_other_audio(tmp_path):
    (tmp_path / "audio" / "aporee_1_2").mkdir(parents=True)
    with pytest.raises(AglError, match="aporee_1_2"):
        demo.write_demo(tmp_path)


def test_generators_are_unit_rms_and_finite():
    from agl.dataset.synth import GENERATORS

    rng = np.random.default_rng(0)
    for name, gen in GENERATORS.items():
        x = gen(rng, demo.SAMPLE_RATE * 3, demo.SAMPLE_RATE)
        assert x.shape == (demo.SAMPLE_RATE * 3,) and np.isfinite(x).all(), name
        assert np.sqrt(np.mean(x**2)) == pytest.approx(1.0, rel=1e-6), name


@pytest.mark.slow
def test_the_checked_in_data_dvc_pins_exactly_a_fresh_demo(demo_dir, tmp_path):
    """A fresh clone's `agl download` must rebuild the very data data.dvc names (real DVC)."""
    pinned = yaml.safe_load((REPO / "data.dvc").read_text())["outs"][0]
    shutil.copytree(demo_dir, tmp_path / "data")
    from agl.dataset.croissant import write_card

    write_card(tmp_path / "data")  # `agl download` writes the card beside the demo (data/croissant.json)
    from agl.dataset.prepare import _audit_tags

    _audit_tags(tmp_path / "data", 25.0)  # and the tag audit (data/tag_audit.csv)
    env = subprocess_env()
    for cmd in (["init", "--no-scm", "-q"], ["add", "-q", "data"]):
        subprocess.run([sys.executable, "-m", "dvc", *cmd], cwd=tmp_path, env=env, check=True,
                       capture_output=True, timeout=300)  # fmt: skip
    fresh = yaml.safe_load((tmp_path / "data.dvc").read_text())["outs"][0]
    assert (fresh["md5"], fresh["nfiles"], fresh["size"]) == (
        pinned["md5"], pinned["nfiles"], pinned["size"]
    ), "the demo generator changed: run `agl download && dvc commit data.dvc`, commit data.dvc"


def test_scipy_is_imported_before_the_clip_threads_start(tmp_path):
    """`agl download` once failed under load with "cannot import name 'PytestTester' from
    partially initialized module 'scipy._lib._testutils'": the clip threads imported scipy
    lazily, several at once. A fresh process records what is imported as the pool starts."""
    probe = (
        "import sys, concurrent.futures as cf\n"
        "seen = []\n"
        "class Pool(cf.ThreadPoolExecutor):\n"
        "    def __init__(self, *a, **k):\n"
        "        seen.append(all(m in sys.modules for m in ('scipy.fft', 'scipy.signal')))\n"
        "        super().__init__(*a, **k)\n"
        "cf.ThreadPoolExecutor = Pool\n"
        "from agl.dataset import demo\n"
        "assert 'scipy' not in sys.modules, 'imported before generate: the probe proves nothing'\n"
        "demo.generate(workers=2)\n"
        "print(seen)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env=subprocess_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True]"
