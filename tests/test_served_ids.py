# ruff: noqa: F811  (pytest fixtures imported from test_eee are parameters here)
"""The served-model ledger compares whole ids (provider + model), and the EEE export says which
model answered (issue 49): `evilcorp/x` served for `google/x` passed as the asked model, and a
run answered by another model was exported as the model asked, with no trace of the served one."""

from __future__ import annotations

import json
import shutil

import pytest
from test_eee import synthetic, validate_all, validators  # noqa: F401  (module fixtures, shared)

from agl.interchange.eee_export import ExportConfig, export_runs
from agl.predictions.served import ledger, same_model


@pytest.mark.parametrize("asked, served, same", [
    ("google/x", "evilcorp/x", False),
    ("google/gemini-2.5-flash", "evil/google/gemini-2.5-flash", False),
    ("x", "evilcorp/x", False),
    ("google/x", "x", False),
    ("google/x", "Google/X", True),
    ("gemini-2.5-flash", "models/gemini-2.5-flash", True),
    ("gpt-4o-audio-preview", "gpt-4o-audio-preview-2024-12-17", True),
    ("openai/gpt-4o-audio-preview", "openai/gpt-4o-audio-preview-2024-12-17", True),
    ("gemini-2.5-flash", "gemini-2.5-flash-preview-05-20", False),
])
def test_served_ids_are_compared_whole(asked, served, same):
    assert same_model(asked, served) is same


def test_another_providers_model_of_the_same_name_is_flagged():
    clips = {f"c{i}": {"served_model": "evilcorp/x"} for i in range(3)}
    out = ledger(clips, list(clips), "google/x")
    assert out["served_flags"] == ["served 'evilcorp/x' for 3 of 3 clip(s), not the asked 'google/x'"]


def test_the_export_carries_the_served_model_and_marks_a_mismatch(tmp_path, synthetic, validators):
    runs, manifest = synthetic
    root = tmp_path / "runs"
    shutil.copytree(runs, root)
    run = root / "knn"
    doc = json.loads((run / "metrics.json").read_text())
    doc["model"] = "google/x"
    (run / "metrics.json").write_text(json.dumps(doc))
    asked = ledger({f"c{i}": {"served_model": "google/x"} for i in range(2)}, ["c0", "c1"], "google/x")
    (run / "run_summary.json").write_text(json.dumps(asked))
    (written,), _ = export_runs([root], manifest, tmp_path / "same", ExportConfig(resamples=50))
    details = json.loads(written.read_text())["model_info"]["additional_details"]
    assert details["served_models"] == "google/x (1)" and details["served_mismatch"] == "false"
    other = ledger({"c0": {"served_model": "evilcorp/x"}, "c1": {"served_model": "google/x"}},
                   ["c0", "c1"], "google/x")
    (run / "run_summary.json").write_text(json.dumps(other))
    (written,), _ = export_runs([root], manifest, tmp_path / "other", ExportConfig(resamples=50))
    record = json.loads(written.read_text())
    details = record["model_info"]["additional_details"]
    assert record["model_info"]["id"] == "google/x"  # what was asked, with what answered beside it
    assert details["served_models"] == "evilcorp/x (0.5), google/x (0.5)"
    assert details["served_mismatch"] == "true" and "evilcorp/x" in details["served_flags"]
    assert validate_all(tmp_path / "other", validators) == 1
