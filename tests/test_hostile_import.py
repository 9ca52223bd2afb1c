# ruff: noqa: F811  (pytest fixtures imported from test_eee are parameters here)
"""Imported Every Eval Ever records that no run can have, the same model twice, and files a
careless or hostile publisher could hand over (issue 49): each is one line naming the field and
nothing is imported, or two runs stand side by side; never a traceback, never an overwrite."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from test_eee import _corrupt, record, synthetic  # noqa: F401  (module fixtures, shared)

from agl.cli import main


def _import(src: Path, out: Path, manifest: Path, capsys) -> tuple[int, str]:
    code = main(["import", str(src), "--out", str(out), "--manifest", str(manifest),
                 "--params", str(out.parent / "none.yaml")])
    return code, capsys.readouterr().err.strip()


def _at(doc, result_id: str) -> tuple[int, dict]:
    return next((i, r) for i, r in enumerate(doc["evaluation_results"])
                if r["evaluation_result_id"] == result_id)


def _set_score(result_id, value):
    def change(doc):
        _at(doc, result_id)[1]["score_details"]["score"] = value
    return change


def _swap_interval(doc):
    ci = _at(doc, "paper.distance_error_km")[1]["score_details"]["uncertainty"]["confidence_interval"]
    ci["lower"], ci["upper"] = ci["upper"] + 10, ci["lower"]


def _clips(doc):
    _at(doc, "paper.country_acc")[1]["score_details"]["details"]["n_clips"] = "99999"


def _samples(doc):
    _at(doc, "paper.country_acc")[1]["score_details"]["uncertainty"]["num_samples"] = 99999


@pytest.mark.parametrize("change, field, said", [
    (_set_score("paper.distance_error_km", -500.0), "score", "-500 is outside"),
    (_set_score("paper.distance_error_km", 1e308), "score", "1e+308 is outside"),
    (_set_score("paper.country_acc", 7.5), "score", "7.5 is outside"),
    (_set_score("strict.reject_rate", 1.5), "score", "1.5 is outside"),
    (_swap_interval, "confidence_interval", "is above upper"),
    (_clips, "details.n_clips", "99999 clips, but the dataset has 8"),
    (_samples, "uncertainty.num_samples", "99999 clips, but the dataset has 8"),
])
def test_impossible_stated_numbers_are_refused_naming_the_field(tmp_path, capsys, record, synthetic,
                                                                 change, field, said):
    bad = _corrupt(tmp_path, record, change)
    code, err = _import(bad, tmp_path / "imported", synthetic[1], capsys)
    assert code == 2 and "\n" not in err and field in err and said in err, err
    assert "evaluation_results[" in err
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_not_shown_as_a_dash(tmp_path, capsys, record, synthetic, constant):
    """Python's JSON reader takes NaN and Infinity; a record stating one used to reach the board as '—'."""
    bad = _corrupt(tmp_path, record, _set_score("paper.geoscore", 12345.5))
    bad.write_text(bad.read_text().replace("12345.5", constant))
    code, err = _import(bad, tmp_path / "imported", synthetic[1], capsys)
    assert code == 2 and "\n" not in err and f"{constant} is not a number JSON has" in err, err


def _second_evaluation(doc):
    doc["evaluation_id"] += "-again"


def _copy_with_rows(record: Path, dest: Path, uid: str, change=None) -> None:
    """The record and its rows under a new file name `uid` (a UUID, as EEE names them)."""
    doc = json.loads(record.read_text())
    if change:
        change(doc)
    rows = [json.loads(x) for x in record.with_name(f"{record.stem}_samples.jsonl").read_text().splitlines()]
    for r in rows:
        r["evaluation_id"] = doc["evaluation_id"]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    detail = doc["detailed_evaluation_results"]
    detail["checksum"] = hashlib.sha256(text.encode()).hexdigest()
    detail["file_path"] = str(Path(detail["file_path"]).with_name(f"{uid}_samples.jsonl"))
    (dest / f"{uid}.json").write_text(json.dumps(doc))
    (dest / f"{uid}_samples.jsonl").write_text(text)


def test_two_records_of_one_model_are_two_runs(tmp_path, capsys, record, synthetic):
    """Two evaluations of one organization and model used to import as '2 EEE record(s)
    imported' and keep only the second."""
    src = tmp_path / "src"
    src.mkdir()
    _copy_with_rows(record, src, "11111111-1111-4111-8111-111111111111")
    _copy_with_rows(record, src, "22222222-2222-4222-8222-222222222222", _second_evaluation)
    code, err = _import(src, tmp_path / "imported", synthetic[1], capsys)
    assert code == 0, err
    folders = sorted(p.name for p in (tmp_path / "imported").iterdir())
    assert len(folders) == 2 and folders[0].split("@")[0] == folders[1].split("@")[0], folders
    docs = [json.loads((tmp_path / "imported" / f / "metrics.json").read_text()) for f in folders]
    assert len({d["eee_evaluation_id"] for d in docs}) == 2 and len({d["run"] for d in docs}) == 2
    # again: the same two folders, rewritten in place (an import is idempotent)
    assert _import(src, tmp_path / "imported", synthetic[1], capsys)[0] == 0
    assert sorted(p.name for p in (tmp_path / "imported").iterdir()) == folders
    # one more evaluation of that model, imported later alone: a third run, not an overwrite
    later = tmp_path / "later"
    later.mkdir()
    _copy_with_rows(record, later, "33333333-3333-4333-8333-333333333333",
                    lambda d: d.update(evaluation_id=d["evaluation_id"] + "-third"))
    assert _import(later, tmp_path / "imported", synthetic[1], capsys)[0] == 0
    assert len(list((tmp_path / "imported").iterdir())) == 3


def test_one_evaluation_in_two_files_is_refused(tmp_path, capsys, record, synthetic):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a", "b"):
        doc = json.loads(record.read_text())
        del doc["detailed_evaluation_results"]
        (src / f"{name}.json").write_text(json.dumps(doc))
    code, err = _import(src, tmp_path / "imported", synthetic[1], capsys)
    assert code == 2 and "\n" not in err and "is also" in err and "imported once" in err, err
    assert not (tmp_path / "imported").exists()


def test_non_utf8_rows_and_deep_json_are_one_line(tmp_path, capsys, record, synthetic):
    bad = _corrupt(tmp_path, record, lambda d: d.pop("detailed_evaluation_results"))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, err = _import(deep, tmp_path / "imported", synthetic[1], capsys)
    assert code == 2 and "\n" not in err and "deep.json" in err, err
    latin = tmp_path / "latin" / "r.json"
    latin.parent.mkdir()
    latin.write_bytes(bad.read_bytes().replace(b'"evaluation_id"', b'"evaluation_id_\xe9"', 1))
    code, err = _import(latin, tmp_path / "imported", synthetic[1], capsys)
    assert code == 2 and "\n" not in err and "not UTF-8" in err, err
    # rows: a Latin-1 byte in the samples file (its checksum made to match)
    (tmp_path / "rows").mkdir()
    rows_bad = _corrupt(tmp_path / "rows", record, lambda d: None)
    samples = rows_bad.with_name(f"{rows_bad.stem}_samples.jsonl")
    raw = samples.read_bytes().replace(b"reply 3", b"r\xe9ply 3")
    samples.write_bytes(raw)
    doc = json.loads(rows_bad.read_text())
    doc["detailed_evaluation_results"]["checksum"] = hashlib.sha256(raw).hexdigest()
    rows_bad.write_text(json.dumps(doc))
    code, err = _import(rows_bad, tmp_path / "imported", synthetic[1], capsys)
    assert code == 2 and "\n" not in err and "not UTF-8" in err and "row" in err, err


def test_a_link_at_the_import_folder_is_not_written_through(tmp_path, capsys, record, synthetic):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "metrics.json").write_text("mine\n")
    out = tmp_path / "imported"
    out.mkdir()
    bad = _corrupt(tmp_path, record, lambda d: None)
    # the folder the import will write: found by a first import elsewhere
    assert _import(bad, tmp_path / "probe", synthetic[1], capsys)[0] == 0
    (name,) = [p.name for p in (tmp_path / "probe").iterdir()]
    (out / name).symlink_to(elsewhere)
    code, err = _import(bad, out, synthetic[1], capsys)
    assert code == 2 and "\n" not in err and "leads outside" in err, err
    assert (elsewhere / "metrics.json").read_text() == "mine\n"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["metrics.json"]
