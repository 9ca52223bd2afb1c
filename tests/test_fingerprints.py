"""Chromaprint duplicates on a test set built from one demo clip: the clip, a 20-s excerpt of
it at half the gain, an MP3 re-encode, and an unrelated clip (fpcalc, Debian's
libchromaprint-tools; skipped without it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agl.dataset import fingerprints as fp

pytestmark = pytest.mark.skipif(shutil.which("fpcalc") is None,
                                reason="fpcalc (apt-get install libchromaprint-tools) is not installed")
SOURCE, OTHER = "demo_0004", "demo_0015"
EXCERPT_START_S = 3.0
EXCERPT_S = 14.5  # the demo's clips last 8-18 s (issue 45: one of 130 s); demo_0004 lasts 18 s


@pytest.fixture(scope="module")
def testset(tmp_path_factory, demo_data) -> tuple[Path, Path]:
    """(manifest, audio root): four clips at four places hundreds of km apart."""
    from pedalboard.io import AudioFile

    from agl.dataset.manifest import load_manifest, write_manifest

    root = tmp_path_factory.mktemp("fp")
    frame = load_manifest(demo_data / "manifest.csv").set_index("key")
    src = demo_data / "audio" / SOURCE / frame.at[SOURCE, "mp3name"]
    with AudioFile(str(src)) as f:
        x, sr = f.read(f.frames), f.samplerate
    files = {"a_clip": src, "c_unrelated": demo_data / "audio" / OTHER / frame.at[OTHER, "mp3name"]}
    (root / "made").mkdir()
    with AudioFile(str(root / "made" / "excerpt.wav"), "w", sr, x.shape[0]) as f:
        f.write(0.5 * x[:, int(EXCERPT_START_S * sr):int((EXCERPT_START_S + EXCERPT_S) * sr)])
    with AudioFile(str(root / "made" / "reencode.mp3"), "w", sr, x.shape[0], quality=96) as f:
        f.write(x)
    files.update(b_excerpt=root / "made" / "excerpt.wav", d_reencode=root / "made" / "reencode.mp3")
    rows = []
    for i, (key, path) in enumerate(sorted(files.items())):
        (root / "audio" / key).mkdir(parents=True)
        shutil.copy(path, root / "audio" / key / path.name)
        rows.append({**frame.loc[SOURCE].to_dict(), "key": key, "mp3name": path.name,
                     "latitude": 10.0 * i, "longitude": 20.0 * i, "city": f"City {i}",
                     "country": ["Germany", "France", "Japan", "Chile"][i]})
    write_manifest(pd.DataFrame(rows), root / "manifest.csv")
    return root / "manifest.csv", root / "audio"


def test_related_clips_pair_with_their_offsets_and_the_unrelated_one_with_nothing(testset, capsys):
    from agl.cli import main

    manifest, audio = testset
    assert main(["audit", "duplicates", "--manifest", str(manifest), "--audio-root", str(audio),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pairs = {(p["a"], p["b"]): p for p in doc["pairs"]}
    assert set(pairs) == {("a_clip", "b_excerpt"), ("a_clip", "d_reencode"), ("b_excerpt", "d_reencode")}
    # b's start sits at a's offset: the excerpt 3 s into the clip, the re-encode at 0
    assert abs(pairs["a_clip", "b_excerpt"]["offset_s"] - EXCERPT_START_S) <= fp.ITEM_S
    assert abs(pairs["a_clip", "d_reencode"]["offset_s"]) <= fp.ITEM_S
    assert abs(pairs["b_excerpt", "d_reencode"]["offset_s"] + EXCERPT_START_S) <= fp.ITEM_S
    # the excerpt's whole 14.5 s (less Chromaprint's ~2.7 s of edge context) overlaps
    assert EXCERPT_S - 4.0 <= pairs["a_clip", "b_excerpt"]["length_s"] <= EXCERPT_S
    assert all(p["ber"] <= 0.1 for p in pairs.values())
    assert doc["clips_in_pairs"] == 3 and doc["recordings"] == 1


def test_the_pairs_are_one_cluster_and_knn_no_longer_finds_the_twin(testset, tmp_path, capsys):
    from agl.cli import main
    from agl.contracts.models import ModelSpec
    from agl.dataset.manifest import clips, load_manifest
    from agl.inference.finalize import read_run
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.prompts import load_prompt
    from agl.scoring.clusters import cluster_labels, join

    manifest, audio = testset
    main(["audit", "duplicates", "--manifest", str(manifest), "--audio-root", str(audio), "--json"])
    table = tmp_path / "duplicates.json"
    table.write_text(capsys.readouterr().out)
    frame = load_manifest(manifest)
    for unit in ("clip", "site:25", "cell:1", "city"):
        labels = cluster_labels(frame, unit)
        assert len(set(labels)) == 4
        joined = join(labels, frame["key"], fp.read_pairs(table))
        assert list(joined) == [0, 0, 1, 0]  # a, b, d one recording; c its own

    def knn(settings):
        out = tmp_path / f"knn{len(settings)}"
        run_inference(ModelSpec("knn", "knn", "logmel-stats", settings=settings), load_prompt(),
                      clips(frame), out_dir=out, audio_root=audio, options=RunOptions(progress=False))
        return read_run(out)

    before = knn({"k": 1, "leave_out": "site:25"})
    assert before["a_clip"].country in ("France", "Chile")  # its own twin's place
    after = knn({"k": 1, "leave_out": "site:25", "duplicates": str(table)})
    assert {p.country for k, p in after.items() if k != "c_unrelated"} == {"Japan"}
    # evaluate's intervals resample the joined clusters: 4 sites, 2 recordings
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    config = EvaluateConfig(protocols=("paper",), metric_bootstrap=10, track=False)
    run = tmp_path / f"knn{3}" / "predictions.jsonl"
    plain = evaluate_run("knn", run, manifest, tmp_path / "plain", config)
    joined = evaluate_run("knn", run, manifest, tmp_path / "joined", config,
                          links=tuple(fp.read_pairs(table)))
    assert plain["protocols"]["paper"]["n_clusters"] == 4
    assert joined["protocols"]["paper"]["n_clusters"] == 2
    assert joined["protocols"]["paper"]["resampling_unit"] == "site:25"
    # ... and so do the report's (the report stage reads the pipeline's table)
    from agl.core import canonical
    from agl.report.build import _unit
    from agl.report.inputs import collect_runs, with_clusters

    csv = tmp_path / "duplicates.csv"
    canonical.write_csv(fp.duplicates_table(clips(frame), audio, fp.DuplicatesConfig(enabled=True)), csv)
    runs = collect_runs([tmp_path], "paper")
    assert [len(set(r.scored["cluster"])) for r in with_clusters(runs, _unit("site:25", csv))] == [2, 2]
    assert [len(set(r.scored["cluster"])) for r in with_clusters(runs, _unit("site:25", None))] == [4, 4]


def test_the_pipeline_table_is_empty_when_off_and_the_audits_pairs_when_on(testset):
    from agl.dataset.manifest import clips, load_manifest
    from agl.errors import AglError

    manifest, audio = testset
    rows = clips(load_manifest(manifest))
    off = fp.duplicates_table(rows, audio, fp.DuplicatesConfig.from_params({}))
    assert off.empty and list(off) == list(fp.TABLE_COLUMNS)
    on = fp.duplicates_table(rows, audio, fp.DuplicatesConfig.from_params({"enabled": True}))
    assert [tuple(r) for r in on[["a", "b"]].to_numpy()] == [
        ("a_clip", "b_excerpt"), ("a_clip", "d_reencode"), ("b_excerpt", "d_reencode")]
    with pytest.raises(AglError, match="max_ber"):
        fp.DuplicatesConfig.from_params({"max_ber": 1.5})


def test_fpcalc_missing_is_one_line(testset, monkeypatch, capsys):
    from agl.cli import main

    manifest, audio = testset
    monkeypatch.setenv("PATH", "/nonexistent")
    rc = main(["audit", "duplicates", "--manifest", str(manifest), "--audio-root", str(audio)])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "\n" not in err and "libchromaprint-tools" in err and "Traceback" not in err


def test_overlap_with_an_outside_corpus_is_cached(testset, tmp_path, capsys):
    from agl.cli import main

    manifest, audio = testset
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(next((audio / "d_reencode").iterdir()), corpus / "soundingearth_0001.mp3")
    args = ["audit", "overlap", "--manifest", str(manifest), "--audio-root", str(audio),
            "--corpus", str(corpus), "--cache", str(tmp_path / "cache"), "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["matches"]) == {"a_clip", "b_excerpt", "d_reencode"}
    assert doc["unmatched"] == ["c_unrelated"] and doc["n_unmatched"] == 1
    cached = list((tmp_path / "cache").iterdir())
    assert len(cached) == 1 and np.frombuffer(cached[0].read_bytes(), "<u4").size > 100
    # the leaderboard on the clips with no match: a run scored against the clean manifest
    from agl.contracts.models import ModelSpec
    from agl.dataset.manifest import clips, load_manifest
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.prompts import load_prompt

    assert main([*args[:-1], "--clean-manifest", str(tmp_path / "clean.csv")]) == 0
    capsys.readouterr()
    assert list(load_manifest(tmp_path / "clean.csv")["key"]) == ["c_unrelated"]
    # predictions for the whole set are refused against it (never silently dropped) ...
    spec = ModelSpec("g", "random-sphere", "uniform-sphere", settings={"seed": 0})
    run_inference(spec, load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / "g",
                  audio_root=None, options=RunOptions(progress=False))
    evaluate = ["evaluate", "--manifest", str(tmp_path / "clean.csv"), "--json", "--bootstrap", "0"]
    assert main([*evaluate, str(tmp_path / "g" / "predictions.jsonl")]) == 2
    assert "not in the manifest" in capsys.readouterr().err
    # ... a run on the clean manifest is scored on those clips, with their n
    run_inference(spec, load_prompt(), clips(load_manifest(tmp_path / "clean.csv")),
                  out_dir=tmp_path / "clean", audio_root=None, options=RunOptions(progress=False))
    assert main([*evaluate, str(tmp_path / "clean" / "predictions.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 1
