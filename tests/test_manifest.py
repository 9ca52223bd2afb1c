"""Manifest loading: the published AGL1K defect is repaired with one warning; everything else
is an error that names the row and field."""

import pytest

from agl.dataset.manifest import CATEGORY_COLUMNS, COLUMNS, ManifestWarning, load_manifest, write_manifest
from agl.errors import AglError

HEADER = ",".join(COLUMNS)


def row(key="k1", lon="2.35", lat="48.85", mp3="a.mp3", seconds="30", cats=None, **kw):
    cats = cats or ["1.0", "0.0", "0.0", "0.0", "0.0", "1.0", "0.0", "0.0"]
    vals = {"key": key, "short_key": "1", "longitude": lon, "latitude": lat, "altitude": "",
            "description": "d", "title": "t", "mp3name": mp3, "mp3seconds": seconds,
            "city": "Paris", "country": "France", "continent": "Europe", **kw}
    return ",".join([vals[c] for c in COLUMNS[:12]] + cats)


def write(tmp_path, lines):
    path = tmp_path / "m.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_published_agl1k_manifest_is_repaired_with_one_warning(agl1k_manifest):
    with pytest.warns(ManifestWarning, match="19 names for 20 fields") as record:
        m = load_manifest(agl1k_manifest)
    assert len(record) == 1
    assert len(m) == 1444
    assert list(CATEGORY_COLUMNS) == [c for c in m.columns if c in CATEGORY_COLUMNS]
    essaouira = m.set_index("key").loc["aporee_26839_30948"]
    assert essaouira["city"] == "Essaouira" and essaouira["mp3name"] == "20020207EssaouiraRempartsMuezzin.mp3"
    assert m["mp3seconds"].gt(0).all()
    assert (m["continent"] == "").sum() == 6  # Vatican City rows are kept, not dropped


def test_well_formed_manifest_loads_without_warning(tmp_path, recwarn):
    m = load_manifest(write(tmp_path, [HEADER, row(), row(key="k2")]))
    assert len(m) == 2 and m["latitude"].dtype == float
    assert not [w for w in recwarn if issubclass(w.category, ManifestWarning)]


def test_round_trip_through_write_manifest(tmp_path):
    m = load_manifest(write(tmp_path, [HEADER, row(), row(key="k2")]))
    write_manifest(m, tmp_path / "out.csv")
    assert load_manifest(tmp_path / "out.csv").equals(m)


def test_other_shape_mismatch_names_the_row(tmp_path):
    path = write(tmp_path, [HEADER, row(), row(key="k2") + ",extra"])
    with pytest.raises(AglError, match=r"line 3: 21 fields but the header names 20"):
        load_manifest(path)


def test_short_row_names_the_row(tmp_path):
    path = write(tmp_path, [HEADER, row(), ",".join(row(key="k2").split(",")[:-2])])
    with pytest.raises(AglError, match=r"row 2: fewer than 20 fields"):
        load_manifest(path)


def test_missing_required_column(tmp_path):
    header = HEADER.replace("mp3seconds", "duration")
    with pytest.raises(AglError, match="missing required column.*mp3seconds"):
        load_manifest(write(tmp_path, [header, row()]))


def test_duplicate_key(tmp_path):
    with pytest.raises(AglError, match=r"row 3 \(key k1\) field 'key': duplicate key, first seen in row 1"):
        load_manifest(write(tmp_path, [HEADER, row(), row(key="k2"), row()]))


@pytest.mark.parametrize(
    ("kw", "field", "what"),
    [
        ({"lat": "north"}, "latitude", "not a number"),
        ({"lat": "91"}, "latitude", "outside"),
        ({"lon": "-181"}, "longitude", "outside"),
        ({"lon": ""}, "longitude", "not a number"),
        ({"seconds": "-3"}, "mp3seconds", "outside"),
    ],
)
def test_bad_numbers_name_row_and_field(tmp_path, kw, field, what):
    with pytest.raises(AglError, match=rf"row 2 \(key k2\) field '{field}'.*{what}"):
        load_manifest(write(tmp_path, [HEADER, row(), row(key="k2", **kw)]))


def test_bad_category_value(tmp_path):
    cats = ["1.0", "0.0", "x", "0.0", "0.0", "1.0", "0.0", "0.0"]
    with pytest.raises(AglError, match="row 1 .* field 'music'"):
        load_manifest(write(tmp_path, [HEADER, row(cats=cats)]))


@pytest.mark.parametrize("name", ["../../x.mp3", "sub/x.mp3", "..", "a\\b.mp3", ""])
def test_mp3name_must_be_a_plain_file_name(tmp_path, name):
    with pytest.raises(AglError, match="field 'mp3name'.*not a plain file name"):
        load_manifest(write(tmp_path, [HEADER, row(mp3=name)]))


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(AglError, match="manifest not found"):
        load_manifest(tmp_path / "nope.csv")
    with pytest.raises(AglError, match="empty file"):
        load_manifest(write(tmp_path, [""]))


def test_cli_reports_bad_manifest_in_one_line(tmp_path, capsys, qwen_published):
    from agl.cli import main

    bad = write(tmp_path, [HEADER, row(lat="north")])
    assert main(["evaluate", str(qwen_published), "--manifest", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'latitude'" in err[0] and "Traceback" not in err[0]
