"""The built demo (conftest.built_demo: `agl download && dvc repro`): every run exports as
schema-valid EEE records, and `agl download` left a Croissant card listing every clip."""

from __future__ import annotations

import pytest
from test_eee import validate_all, validators  # noqa: F401  (a fixture, shared)

from agl.cli import main
from agl.dataset.manifest import load_manifest


def test_the_demo_exports_and_describes_itself(built_demo, tmp_path, validators, monkeypatch):  # noqa: F811
    monkeypatch.chdir(built_demo.work)  # the command's defaults: build/runs build/paper, data/
    assert main(["export", "eee", "--out", str(tmp_path / "a")]) == 0
    runs = sorted(p for p in (built_demo.work / "build" / "runs").iterdir() if (p / "metrics.json").is_file())
    assert validate_all(tmp_path / "a", validators) == len(runs) > 0
    mlc = pytest.importorskip("mlcroissant", reason="mlcroissant (the test extra) validates the card")
    clips = len(load_manifest(built_demo.work / "data" / "manifest.csv"))
    dataset = mlc.Dataset(jsonld=str(built_demo.work / "data" / "croissant.json"))
    assert sum(1 for _ in dataset.records(record_set="clips")) == clips == 32
    assert dataset.metadata.name == "AGL1K synthetic demo"
