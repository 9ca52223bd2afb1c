"""Canonical writers: floats at the stated precision per quantity, stable order, no noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from agl.core import canonical

REPO = Path(__file__).resolve().parents[1]

NAMES = {  # a column name of each quantity, as the stages write them
    "km": "distance_km",
    "degrees": "latitude",
    "dbfs": "rms_dbfs",
    "seconds": "seconds",
    "share": "country_acc",
    "measure": "spectral_flatness",
    "points": "geoscore",
    "usd": "cost_usd",
    "similarity": "cosine",
}


def test_every_quantity_has_a_name_rule_and_a_stated_precision():
    assert set(NAMES) == set(canonical.PRECISION)
    for quantity, name in NAMES.items():
        assert canonical.quantity_of(name) == quantity, name
    assert canonical.quantity_of("l_k") is None  # default: significant digits


@settings(max_examples=60, deadline=None)
@given(
    quantity=st.sampled_from(sorted(NAMES)),
    x=st.floats(min_value=-2e4, max_value=2e4, allow_nan=False, allow_infinity=False),
)
def test_csv_and_json_round_trip_at_the_stated_precision(tmp_path_factory, quantity, x):
    tmp = tmp_path_factory.mktemp("rt")
    name, d = NAMES[quantity], canonical.PRECISION[quantity]
    canonical.write_csv(pd.DataFrame({name: [x]}), tmp / "t.csv")
    canonical.write_json(tmp / "t.json", {name: x, "nested": {name: [x]}})
    from_csv = float(pd.read_csv(tmp / "t.csv")[name][0])
    doc = json.loads((tmp / "t.json").read_text())
    for y in (from_csv, doc[name], doc["nested"][name][0]):
        assert abs(y - x) <= 0.5 * 10**-d + 1e-9 * abs(x)  # within half a unit of the last digit
        assert y == float(f"{x:.{d}f}") or (y == 0 and float(f"{x:.{d}f}") == 0)
    # Writing what was read back changes nothing: canonical output is a fixed point.
    canonical.write_csv(pd.read_csv(tmp / "t.csv"), tmp / "t2.csv")
    assert (tmp / "t2.csv").read_bytes() == (tmp / "t.csv").read_bytes()


def test_machine_noise_in_the_last_digits_gives_the_same_bytes(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "key": [f"k{i}" for i in range(50)],
            "distance_km": rng.uniform(0, 20000, 50),
            "latitude": rng.uniform(-90, 90, 50),
            "rms_dbfs": rng.uniform(-80, 0, 50),
            "weight": rng.normal(size=50),
        }
    )
    noisy = frame.copy()
    for col in ("distance_km", "latitude", "rms_dbfs", "weight"):
        noisy[col] = frame[col] * (1 + 1e-13)  # what another BLAS/SIMD path changes
    canonical.write_csv(frame, tmp_path / "a.csv")
    canonical.write_csv(noisy, tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    canonical.write_json(tmp_path / "a.json", frame.to_dict(orient="list"))
    canonical.write_json(tmp_path / "b.json", noisy.to_dict(orient="list"))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_json_is_sorted_has_no_nan_no_negative_zero_and_unix_newlines(tmp_path):
    canonical.write_json(
        tmp_path / "x.json",
        {"b": float("nan"), "a": -0.0, "c": np.float32(0.25), "d": (1, 2), "e": np.array([1.5, np.inf])},
    )
    raw = (tmp_path / "x.json").read_bytes()
    assert b"\r" not in raw and raw.endswith(b"}\n")
    doc = json.loads(raw)
    assert list(doc) == ["a", "b", "c", "d", "e"]
    assert doc == {"a": 0.0, "b": None, "c": 0.25, "d": [1, 2], "e": [1.5, None]}
    assert "-0.0" not in raw.decode()


def test_exact_subtrees_stay_verbatim():
    doc = canonical.canonical(
        {"original": {"latitude": 48.856613456789}, "latitude": 48.856613456789},
        quantities={"original": canonical.EXACT},
    )
    assert doc == {"original": {"latitude": 48.856613456789}, "latitude": 48.856613}


def test_nan_stays_empty_in_csv_and_rows_keep_their_order(tmp_path):
    frame = pd.DataFrame({"key": ["b", "a"], "aci": [math.nan, 1.23456789]})
    canonical.write_csv(frame, tmp_path / "x.csv")
    assert (tmp_path / "x.csv").read_text() == "key,aci\nb,\na,1.2346\n"
    canonical.write_csv(frame, tmp_path / "y.csv", sort_by="key")
    assert (tmp_path / "y.csv").read_text() == "key,aci\na,1.2346\nb,\n"


def test_timings_go_beside_the_output_and_dvc_ignores_them(tmp_path):
    stable, timings = canonical.split({"n": 3, "wall_s": 1.234567}, ("wall_s",))
    assert stable == {"n": 3} and timings == {"wall_s": 1.234567}
    path = canonical.write_timings(tmp_path / "filter_summary.json", timings)
    assert path.name == "filter_summary.timings.json"
    patterns = (REPO / ".dvcignore").read_text().split()
    assert f"*{canonical.TIMINGS_SUFFIX}" in patterns


def test_tracked_writers_put_no_timings_in_filter_and_tag_summaries(tmp_path, real_mp3s):
    """The filter stage's tracked summary holds no wall time; its timings file does."""
    import subprocess
    import sys

    import yaml

    rows = [{"key": p.parent.name, "mp3name": p.name} for p in real_mp3s]
    manifest = tmp_path / "m.csv"
    from factories import manifest as make_manifest

    from agl.dataset.manifest import write_manifest

    write_manifest(make_manifest(rows), manifest)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"filter": {"jobs": 1}}))
    out, summary = tmp_path / "f.csv", tmp_path / "s.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "stages" / "filter.py"),
            "--manifest",
            str(manifest),
            "--audio-root",
            str(real_mp3s[0].parents[1]),
            "--out",
            str(out),
            "--summary",
            str(summary),
            "--params",
            str(params),
        ],
        check=True,
        capture_output=True,
    )
    doc = json.loads(summary.read_text())
    assert "wall_s" not in doc and "x_real_time" not in doc and doc["clips"] == 2
    assert "wall_s" in json.loads((tmp_path / "s.timings.json").read_text())
    for line in out.read_text().splitlines()[1:]:
        for cell in line.split(","):
            if "." in cell and cell.replace(".", "").replace("-", "").isdigit():
                assert len(cell.split(".")[1]) <= 6, line
