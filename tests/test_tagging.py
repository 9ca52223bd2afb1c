"""Ontology roll-up on hand-made scores; the tag stage end to end with a tiny random AST."""

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
from helpers import subprocess_env

from agl.curation.ontology import (
    column_membership,
    load_ontology,
    multi_root_classes,
    rollup,
    tagger_classes,
)
from agl.curation.tagging import TagConfig, tag_clips, window_bounds
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]
SPEECH, CHURCH_BELL, RADIO, HUBBUB = "/m/09x0r", "/m/03w41f", "/m/06bz3", "/m/07qfr4h"
ECHO, HISS, DOG = "/m/01jnbd", "/m/07rjwbb", "/m/0bt9lr"


@pytest.fixture(scope="module")
def ontology(shared):
    return load_ontology(shared("data/audioset/ontology.json"))


def test_527_tagger_classes_and_29_multi_root(ontology):
    classes = tagger_classes()
    assert len(classes) == 527 == len(set(classes))
    assert all(c in ontology.classes for c in classes)
    assert len(ontology.roots) == 7
    multi = multi_root_classes(ontology, classes)
    assert len(multi) == 29
    names = {ontology.classes[c].name for c in multi}
    assert {"Church bell", "Hubbub, speech noise, speech babble", "Cowbell"} <= names
    membership = column_membership(ontology, classes)
    # Every class counts somewhere; each multi-root class in every root it reaches.
    assert all(membership[c] for c in classes)
    assert all(len(membership[c]) >= 2 for c in multi)


def test_membership_and_channel_environment_split(ontology):
    cols = {c: ontology.columns_of(c) for c in (SPEECH, CHURCH_BELL, RADIO, HUBBUB, ECHO, HISS)}
    assert cols[SPEECH] == {"human_sounds"}
    assert cols[CHURCH_BELL] == {"music", "sounds_of_things"}
    assert cols[RADIO] == {"channel"}  # Sound reproduction
    assert cols[ECHO] == {"environment_and_background"}  # Acoustic environment
    assert cols[HUBBUB] == {"human_sounds", "environment_and_background"}  # Noise
    assert cols[HISS] == {"animal", "natural_sounds", "source_ambiguous_sounds"}
    with pytest.raises(AglError, match="neither an id nor a class name"):
        ontology.resolve("Not a sound")
    assert ontology.resolve("Church bell") == CHURCH_BELL == ontology.resolve(CHURCH_BELL)


def test_rollup_hand_made_scores(ontology):
    scores = pd.DataFrame(
        [[0.9, 0.7, 0.2, 0.95, 0.1, 0.0], [0.05, 0.3, 0.6, 0.1, 0.4, 0.8]],
        columns=[SPEECH, CHURCH_BELL, RADIO, HUBBUB, ECHO, DOG], index=["a", "b"],
    )
    members = column_membership(ontology, list(scores.columns))
    out = rollup(scores, members)
    assert list(out.columns) == list(CATEGORY_COLUMNS)
    expected = {
        "a": {"human_sounds": 0.95, "animal": 0.0, "music": 0.7, "sounds_of_things": 0.7,
              "channel": 0.2, "environment_and_background": 0.95},
        "b": {"human_sounds": 0.1, "animal": 0.8, "music": 0.3, "sounds_of_things": 0.3,
              "channel": 0.6, "environment_and_background": 0.4},
    }
    for key, cols in expected.items():
        for col, value in cols.items():
            assert out.at[key, col] == pytest.approx(value), (key, col)
    # No scored class reaches these roots: not measured (NaN), never 0.
    assert out["natural_sounds"].isna().all() and out["source_ambiguous_sounds"].isna().all()


def test_window_bounds_cover_the_clip():
    assert window_bounds(5, 10, 10) == [(0, 5)]
    assert window_bounds(25, 10, 10) == [(0, 10), (10, 20), (15, 25)]
    assert window_bounds(20, 10, 5) == [(0, 10), (5, 15), (10, 20)]


def test_config_is_validated():
    assert TagConfig.from_params(yaml.safe_load((REPO / "params.yaml").read_text())["tag"])
    with pytest.raises(AglError, match="unknown key"):
        TagConfig.from_params({"taggr": "transformers"})
    with pytest.raises(AglError, match="tagger"):
        TagConfig.from_params({"tagger": "panns"})
    with pytest.raises(AglError, match="pooling"):
        TagConfig.from_params({"pooling": "median"})


@pytest.fixture(scope="module")
def tiny_ast(tmp_path_factory, ontology):
    """A tiny random AST whose labels are the ontology names of the 527 AudioSet classes."""
    import torch
    from transformers import ASTConfig, ASTFeatureExtractor, ASTForAudioClassification

    torch.manual_seed(0)
    id2label = {i: ontology.classes[c].name for i, c in enumerate(tagger_classes())}
    config = ASTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=37, num_mel_bins=32, max_length=128,
                       id2label=id2label, label2id={v: k for k, v in id2label.items()})
    path = tmp_path_factory.mktemp("tiny-ast")
    ASTForAudioClassification(config).save_pretrained(path)
    ASTFeatureExtractor(num_mel_bins=32, max_length=128).save_pretrained(path)
    return path


def test_transformers_tagger_on_a_real_mp3(tiny_ast, real_mp3s, shared):
    clip = real_mp3s[0]
    cfg = TagConfig(tagger="transformers", checkpoint=str(tiny_ast), speech="none",
                    ontology=str(shared("data/audioset/ontology.json")), pooling="max",
                    window_s=10.0, hop_s=5.0)
    run = tag_clips([(clip.parent.name, clip), ("gone", clip.parent / "missing.mp3")], cfg)
    tags, classes = run.frame(), run.class_frame()
    assert list(tags["status"]) == ["ok", "missing"]
    assert list(classes.columns) == ["key", *tagger_classes()]  # output order = index order
    row = classes.iloc[0, 1:].to_numpy(dtype=float)
    assert np.all((row > 0) & (row < 1))  # sigmoid probabilities
    members = column_membership(load_ontology(shared("data/audioset/ontology.json")),
                                tagger_classes())
    for col in CATEGORY_COLUMNS:  # every column is the max of its classes, multi-root included
        cls = [c for c in tagger_classes() if col in members[c]]
        assert tags.at[0, col] == pytest.approx(classes.loc[0, cls].max())
    assert tags.loc[1, list(CATEGORY_COLUMNS)].isna().all()  # the missing file is not scored
    summary = run.summary()
    assert summary["multi_root_classes"] == 29 and summary["classes"] == 527
    assert summary["window_s"] == 10.0 and summary["hop_s"] == 5.0 and summary["tagged"] == 1
    mean = tag_clips([(clip.parent.name, clip)],
                     TagConfig(**{**cfg.__dict__, "pooling": "mean"})).class_frame()
    assert np.all(mean.iloc[0, 1:].to_numpy(dtype=float) <= row + 1e-6)  # mean <= max


def test_speech_detector_on_synthetic_speech():
    from agl.curation.tagging import SpeechDetector
    from agl.dataset import synth

    rng = np.random.default_rng(0)
    sr, n = 16_000, 16_000 * 6
    vad = SpeechDetector()
    speech = (synth.unit_rms(synth.speech(rng, n, sr)) * 0.1).astype(np.float32)
    noise = rng.normal(0, 0.1, n).astype(np.float32)
    assert vad.speech_seconds(speech) / 6 > 0.3
    assert vad.speech_seconds(noise) / 6 < 0.1


def test_tag_stage_end_to_end(tmp_path, tiny_ast, real_mp3s, agl1k_manifest, shared):
    """stages/tag.py with the tiny AST and silero-vad on a real MP3, after a filter table."""
    from agl.dataset.manifest import load_manifest, write_manifest

    with pytest.warns(UserWarning):
        frame = load_manifest(agl1k_manifest)
    keys = [p.parent.name for p in real_mp3s]
    write_manifest(frame[frame["key"].isin(keys)], tmp_path / "manifest.csv")
    for p in real_mp3s:
        shutil.copytree(p.parent, tmp_path / "audio" / p.parent.name)
    # The filter let only the Berlin clip through: only it is tagged.
    pd.DataFrame({"key": keys, "passed": [k == "aporee_5201_6631" for k in keys]}).to_csv(
        tmp_path / "filter.csv", index=False)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"tag": {
        "tagger": "transformers", "checkpoint": str(tiny_ast), "speech": "vad",
        "ontology": str(shared("data/audioset/ontology.json")), "window_s": 10.0}}))
    out = tmp_path / "build"
    proc = subprocess.run(
        [sys.executable, str(REPO / "stages" / "tag.py"), "--manifest", str(tmp_path / "manifest.csv"),
         "--audio-root", str(tmp_path / "audio"), "--filter", str(tmp_path / "filter.csv"),
         "--out", str(out / "tags.csv"), "--classes", str(out / "tags_classes.csv"),
         "--summary", str(out / "tag_summary.json"), "--params", str(params)],
        capture_output=True, text=True, timeout=300, env=subprocess_env(),
    )
    assert proc.returncode == 0, proc.stderr
    tags = pd.read_csv(out / "tags.csv")
    assert list(tags["key"]) == ["aporee_5201_6631"]
    assert list(tags.columns[3:11]) == list(CATEGORY_COLUMNS)
    assert tags.loc[0, list(CATEGORY_COLUMNS)].between(0, 1).all()
    assert 0 <= tags.at[0, "speech_fraction"] <= 1
    assert tags.at[0, "speech_seconds"] <= tags.at[0, "seconds"]
    assert pd.read_csv(out / "tags_classes.csv").shape == (1, 528)
    summary = json.loads((out / "tag_summary.json").read_text())
    assert summary["skipped_by_filter"] == 1 and summary["multi_root_classes"] == 29


def test_precomputed_tagger_reads_the_manifest(tmp_path, agl1k_manifest):
    from agl.dataset.manifest import load_manifest

    with pytest.warns(UserWarning):
        frame = load_manifest(agl1k_manifest)
    keys = ["aporee_26839_30948", "aporee_5201_6631"]
    run = tag_clips([(k, tmp_path / "unused.mp3") for k in keys],
                    TagConfig(tagger="precomputed", speech="none"), frame)
    tags = run.frame().set_index("key")
    assert tags.at["aporee_5201_6631", "animal"] == 1.0
    assert tags.at["aporee_5201_6631", "human_sounds"] == 0.0
    assert tags.at["aporee_26839_30948", "human_sounds"] == 1.0
    assert run.class_frame().columns.tolist() == ["key"]  # no class scores to report
    with pytest.raises(AglError, match="not in the manifest"):
        tag_clips([("nope", tmp_path / "x.mp3")], TagConfig(speech="none"), frame)


def test_fetch_ontology_pinned_and_cached(tmp_path, shared):
    """The pinned-URL fetch against a local server: checked by SHA-256, fetched once."""
    import http.server
    import threading

    from agl.curation.ontology import fetch_ontology

    source = shared("data/audioset/ontology.json")
    hits: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(source.parent), **kw)

        def do_GET(self):  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ontology.json"
        path = fetch_ontology(tmp_path / "cache", url=url)
        assert path.read_bytes() == source.read_bytes()
        assert fetch_ontology(tmp_path / "cache", url=url) == path
        assert hits == ["/ontology.json"]  # the second call used the cache
        with pytest.raises(AglError, match="SHA-256 differs"):
            fetch_ontology(tmp_path / "other", url=url, sha256="0" * 64)
        with pytest.raises(AglError, match="cannot fetch"):
            fetch_ontology(tmp_path / "other", url=url.replace("ontology.json", "nope.json"))
        assert not (tmp_path / "other" / "ontology.json").exists()
    finally:
        server.shutdown()


def test_checkpoint_labels_map_by_name_or_audioset_index(ontology):
    from agl.curation.tagging import _class_ids

    classes = tagger_classes()
    labels = {i: ontology.classes[c].name for i, c in enumerate(classes)}
    assert _class_ids(labels, ontology, "x") == (classes, 0)
    labels[0] = "Speech (spelled otherwise)"  # 527 outputs: AudioSet's index order decides
    assert _class_ids(labels, ontology, "x") == (classes, 1)
    with pytest.raises(AglError, match="output 1 label 'Meow!' is not an AudioSet class"):
        _class_ids({0: "Speech", 1: "Meow!"}, ontology, "x")
    with pytest.raises(AglError, match="same AudioSet class"):
        _class_ids({0: "Speech", 1: SPEECH}, ontology, "x")
