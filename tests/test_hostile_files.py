"""Bad files and paths for `agl evaluate` and the manifest loader, and what `strict`
does with coordinates off the globe (issue 14, points 6-9)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from factories import manifest, prediction
from helpers import one_line_error

from agl.cli import main
from agl.core.geo import EARTH_MAX_KM
from agl.dataset.manifest import load_manifest, write_manifest
from agl.errors import AglError
from agl.predictions.records import PredictionWriter, Status, prediction_frame, read_predictions
from agl.scoring.evaluate import score_with_notes


@pytest.fixture
def files(tmp_path):
    m = tmp_path / "manifest.csv"
    write_manifest(manifest([{}, {"key": "k1"}]), m)
    preds = tmp_path / "predictions.jsonl"
    with PredictionWriter(preds) as w:
        w.write(prediction("k0", 48.9, 2.3, "Paris", "France", "Europe"))
        w.write(prediction("k1", 40.0, 3.0, "Madrid", "Spain", "Europe"))
    return m, preds



@pytest.mark.parametrize(
    "content",
    [bytes(range(256)) * 8, "ville,été\n".encode("latin-1"), b"\xff\xfe{\x00}\x00", b'{"sample_id": "k0", "st\xe9'],
)
def test_binary_or_non_utf8_predictions_are_one_line(tmp_path, files, capfd, content):
    m, _ = files
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    line = one_line_error(capfd, ["evaluate", str(bad), "--manifest", str(m)])
    assert str(bad) in line
    bad_json = tmp_path / "bad.json"
    bad_json.write_bytes(content)
    one_line_error(capfd, ["evaluate", str(bad_json), "--manifest", str(m)])


def test_folders_and_blocked_paths_are_one_line(tmp_path, files, capfd):
    m, preds = files
    (tmp_path / "adir").mkdir()
    ev = ["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"]
    assert "is a folder" in one_line_error(capfd, [*ev, "--scores-out", str(tmp_path / "adir")])
    assert "is a file" in one_line_error(capfd, [*ev, "--scores-out", str(preds / "s.csv")])
    assert "is a folder" in one_line_error(capfd, ["evaluate", str(preds), "--manifest", str(tmp_path / "adir")])
    assert "is a folder" in one_line_error(capfd, ["evaluate", str(tmp_path / "adir"), "--manifest", str(m)])
    infer = ["infer", "--backend", "random", "--manifest", str(m), "--no-progress", "--cache-dir", ""]
    assert "is a file" in one_line_error(capfd, [*infer, "--out", str(preds)])
    assert "is a folder" in one_line_error(
        capfd, [*infer, "--out", str(tmp_path / "r"), "--manifest", str(tmp_path / "adir")]
    )
    # An existing scores file is overwritten, and a missing folder is made.
    assert main([*ev, "--scores-out", str(tmp_path / "new" / "s.csv")]) == 0
    assert main([*ev, "--scores-out", str(tmp_path / "new" / "s.csv")]) == 0


def test_manifest_with_a_byte_order_mark_loads(tmp_path):
    m = tmp_path / "m.csv"
    write_manifest(manifest([{}, {"key": "k1"}]), m)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + m.read_bytes())
    assert list(load_manifest(bom)["key"]) == ["k0", "k1"]


def test_nul_byte_in_a_manifest_is_an_error(tmp_path):
    m = tmp_path / "m.csv"
    write_manifest(manifest([{"mp3name": "a\x00b.mp3"}, {"key": "k1"}]), m)
    with pytest.raises(AglError, match="line 2: contains a NUL byte"):
        load_manifest(m)


def test_conflicting_duplicates_are_counted_and_warned(tmp_path):
    path = tmp_path / "p.jsonl"
    with PredictionWriter(path) as w:
        w.write(prediction("k0", status=Status.FAILED, error="timeout"))  # a resumed run
        w.write(prediction("k0", 48.9, 2.3, "Paris", "France", "Europe"))
        w.write(prediction("k1", 40.0, 3.0, "Madrid", "Spain", "Europe"))
        w.write(prediction("k1", 41.0, 2.0, "Barcelona", "Spain", "Europe"))
        w.write(prediction("k2", 41.0, 2.0, "Barcelona", "Spain", "Europe"))
        w.write(prediction("k2", 41.0, 2.0, "Barcelona", "Spain", "Europe"))  # same answer
    with pytest.warns(UserWarning, match="1 clip.*conflicting records.*k1"):
        frame = prediction_frame(path)
    assert frame.set_index("sample_id").at["k1", "city"] == "Barcelona"


@pytest.mark.parametrize("lat, lon", [(91.0, 2.0), (1e300, 2.0), (48.0, 540.0), (-90.5, 5.0), (48.0, -181.0)])
def test_strict_counts_a_coordinate_off_the_globe_as_a_failure(lat, lon):
    m = manifest([{}, {"key": "k1"}])
    preds = prediction_frame(
        [
            prediction("k0", lat, lon, "Paris", "France", "Europe"),
            prediction("k1", 48.85, 2.35, "Paris", "France", "Europe"),
        ]
    )
    scored, notes = score_with_notes(m, preds, "strict")
    row = scored.set_index("sample_id").loc["k0"]
    assert row["distance_km"] == EARTH_MAX_KM
    assert bool(row["failed"]) and row["country_correct"] == 0.0
    assert notes["n_invalid_coordinates"] == 1
    assert np.isfinite(scored["distance_km"]).all()
    # paper keeps the authors' behaviour: an out-of-range latitude leaves the distance mean,
    # a longitude is wrapped (documented in agl.scoring.protocols).
    paper, _ = score_with_notes(m, preds, "paper")
    prow = paper.set_index("sample_id").loc["k0"]
    if abs(lat) > 90:
        assert math.isnan(prow["distance_km"])
    elif lon == 540.0:
        assert abs(prow["pred_lon"]) == 180.0  # wrapped, as geopy does


def test_nan_in_a_predictions_file_is_missing(tmp_path):
    path = tmp_path / "p.jsonl"
    rec = prediction("k0", 48.9, 2.3, "Paris", "France", "Europe").to_json()
    path.write_text(json.dumps(rec).replace("48.9", "NaN") + "\n")
    (p,) = read_predictions(path).values()
    assert p.latitude is None and p.longitude is None and "latitude" in p.missing
    assert p.status is Status.PARTIAL
    out = tmp_path / "out.jsonl"
    with PredictionWriter(out) as w:
        w.write(prediction("k0", float("nan"), float("inf"), confidence=float("-inf")))
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} written"))
