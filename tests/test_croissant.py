"""data/croissant.json (agl.dataset.croissant): the dataset folder as a Croissant 1.0 card that
`mlcroissant` loads, listing one record per clip, with the manifest's checksum, its licence,
the published header's defect and repair, and, for a synthetic set, that it is synthetic."""

from __future__ import annotations

import hashlib
import json
import warnings

import pytest
from factories import manifest

from agl.dataset.croissant import HEADER_REPAIR, write_card
from agl.dataset.manifest import load_manifest, write_manifest

mlc = pytest.importorskip("mlcroissant", reason="mlcroissant (the test extra) validates the card")


def records(card) -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its own notes on recommended, optional properties
        dataset = mlc.Dataset(jsonld=str(card))
        return list(dataset.records(record_set="clips"))


def test_the_agl1k_card_lists_its_1444_clips(tmp_path, agl1k_manifest):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the header repair's own warning
        write_manifest(load_manifest(agl1k_manifest), tmp_path / "manifest.csv")  # as agl download does
    card = write_card(tmp_path)
    doc = json.loads(card.read_text())
    rows = records(card)
    assert len(rows) == 1444
    assert rows[0]["clips/key"] == b"aporee_43130_49161" and rows[0]["clips/channel"] == 0.0
    manifest_file = next(d for d in doc["distribution"] if d["@id"] == "manifest.csv")
    assert manifest_file["sha256"] == hashlib.sha256((tmp_path / "manifest.csv").read_bytes()).hexdigest()
    assert HEADER_REPAIR in manifest_file["description"] and "19 names for 20 fields" in HEADER_REPAIR
    assert "creativecommons" in doc["license"] and "synthetic" not in doc["keywords"]
    types = {f["name"]: f["dataType"] for f in doc["recordSet"][0]["field"]}
    assert types["latitude"] == "sc:Float" and types["country"] == "sc:Text" and len(types) == 20
    before = card.read_bytes()
    assert write_card(tmp_path).read_bytes() == before  # the same folder, the same card


def test_a_synthetic_set_says_so(tmp_path):
    frame = manifest([{"key": f"d{i}", "title": f"SYNTHETIC demo clip {i}"} for i in range(5)])
    write_manifest(frame, tmp_path / "manifest.csv")
    (tmp_path / "lock.json").write_text(json.dumps({"version": 1, "source": {"seed": 7}, "files": {}}))
    card = write_card(tmp_path)
    doc = json.loads(card.read_text())
    assert len(records(card)) == 5
    assert doc["description"].startswith("SYNTHETIC") and "synthetic" in doc["keywords"]
    assert any(d["@id"] == "lock.json" for d in doc["distribution"])
