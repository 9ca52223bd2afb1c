"""`agl evaluate` / `agl import` on the authors' published files: the paper's row, exactly."""

import json
import subprocess
import sys

import pytest

from agl.cli import main
from agl.predictions.importer import import_with_report
from agl.predictions.records import Status, read_predictions


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_paper_protocol_reproduces_the_paper_row(capsys, qwen_published, agl1k_manifest):
    r = run_json(capsys, "evaluate", str(qwen_published), "--manifest", str(agl1k_manifest),
                 "--protocol", "paper", "--json", "--bootstrap", "200")
    assert round(r["distance_error_km"], 2) == 5476.83
    assert round(r["continent_acc"], 2) == 0.45
    assert round(r["country_acc"], 2) == 0.26
    assert round(r["city_acc"], 2) == 0.02
    sp, ns = r["by_speech"]["speech"], r["by_speech"]["non_speech"]
    assert (sp["n"], ns["n"]) == (1024, 418)
    assert round(sp["distance_error_km"], 2) == 4540.06
    assert round(ns["distance_error_km"], 2) == 7777.20
    for key in ("n", "median_km", "geoscore", "reject_rate", "within_1km", "within_10km",
                "within_25km", "within_100km", "within_200km", "within_750km", "within_1000km",
                "within_2500km"):
        assert key in r
    lo, hi = r["ci95"]["distance_error_km"]
    assert lo < 5476.83 < hi
    assert r["n_distance_excluded"] == 1  # the one "Not specified" coordinate, as the authors


def test_strict_protocol_runs_on_every_clip(capsys, qwen_published, agl1k_manifest):
    r = run_json(capsys, "evaluate", str(qwen_published), "--manifest", str(agl1k_manifest),
                 "--protocol", "strict", "--json", "--bootstrap", "50", "--labels", "point",
                 "--by", "income")
    assert r["n"] == 1444 and r["notes"]["n_without_prediction"] == 2
    # labels by the recording place (Taiwan is not China), groups by income (tests/test_groups.py)
    assert r["labels"] == "point" and r["relabelled"] >= 214
    assert r["country_acc_point"] < r["country_acc_manifest"] and r["country_acc"] == r["country_acc_point"]
    assert r["groups"]["by"] == "income" and r["groups"]["groups"][0]["group"] == "Low + Lower middle"
    assert r["distance_error_km"] > 5476.83  # refusals count as the farthest point, not 10,000 km
    assert 0.2 < r["country_acc_manifest"] < 0.3


def test_readable_table_without_json(capsys, qwen_published, agl1k_manifest):
    assert main(["evaluate", str(qwen_published), "--manifest", str(agl1k_manifest), "--bootstrap", "20",
                 "--by", "speech"]) == 0
    out = capsys.readouterr().out
    assert "mean distance error (km)" in out and "5476.83" in out and "4540.06" in out
    assert "relabelled: 214 clip(s)" in out and "same country by point" in out
    assert "by speech" in out and "disparity country_acc: worst" in out


def test_import_json_list_then_evaluate_gives_the_same_numbers(tmp_path, capsys, qwen_published, agl1k_manifest):
    out = tmp_path / "qwen.jsonl"
    assert main(["import", str(qwen_published), "--out", str(out)]) == 0
    preds = read_predictions(out)
    assert len(preds) == 1442
    first = preds["aporee_43130_49161"]
    assert first.status is Status.OK and first.city == "London" and first.latitude == 51.5085
    assert first.original["predicted_latitude"] == "51.5085"
    refused = [p for p in preds.values() if p.status is Status.REFUSED]
    assert refused and all(p.latitude is None for p in refused)  # never a silent 0,0
    capsys.readouterr()
    r = run_json(capsys, "evaluate", str(out), "--manifest", str(agl1k_manifest), "--json", "--bootstrap", "10")
    assert round(r["distance_error_km"], 2) == 5476.83 and round(r["country_acc"], 2) == 0.26


def published_jsonl(tmp_path, qwen_published):
    """A JSON Lines file in the shape of the authors' seed_42_ABCD.jsonl, with raw replies."""
    rows = json.loads(qwen_published.read_text())[:3]
    rows[0]["model_output"] = '```json\n{"reason": "church bells", "city": "Rome", "country": "Italy",' \
                              ' "continent": "Europe", "longitude": 12.5, "latitude": 41.9}\n```'
    rows[0]["predicted_latitude"], rows[0]["predicted_longitude"] = 41.9, 12.5
    rows[1]["model_output"] = "I cannot determine where this was recorded."
    rows[2]["model_output"] = ""
    path = tmp_path / "seed_42_ABCD.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path, rows


def test_import_jsonl_and_reparse_counts_rows_without_raw_text(tmp_path, qwen_published):
    path, rows = published_jsonl(tmp_path, qwen_published)
    plain, report = import_with_report(path)
    assert len(plain) == 3 and report.without_raw_text == 0
    assert plain[0].latitude == 41.9 and plain[0].raw_reply.startswith("```json")
    reparsed, report = import_with_report(path, reparse=True)
    assert report.without_raw_text == 1
    assert reparsed[0].status is Status.OK and reparsed[0].city == "Rome" and reparsed[0].reasoning == "church bells"
    assert reparsed[1].status is Status.REFUSED
    assert reparsed[2].status is Status.UNPARSEABLE and "no raw model_output" in reparsed[2].error


def test_import_cli_reports_reparse_gaps(tmp_path, capsys, qwen_published):
    path, _ = published_jsonl(tmp_path, qwen_published)
    assert main(["import", str(path), "--out", str(tmp_path / "o.jsonl"), "--reparse"]) == 0
    err = capsys.readouterr().err
    assert "1 row(s) had no raw reply to reparse" in err


def test_bad_published_file_is_one_line(tmp_path, capsys, agl1k_manifest):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"foo": 1}]')
    assert main(["evaluate", str(bad), "--manifest", str(agl1k_manifest)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no 'question_id'" in err


def test_help_is_fast_and_imports_nothing_heavy():
    code = ("import sys, time; t=time.time(); from agl.cli import build_parser; build_parser(); "
            "heavy=[m for m in ('torch','transformers','mlflow','pandas','matplotlib',"
            "'google.genai','openai','dvc') if m in sys.modules]; "
            "print(heavy, time.time()-t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    heavy, _ = out.rsplit(" ", 1)
    assert heavy.strip() == "[]"
    # Fast is counted in imports, not seconds (seconds depend on the machine's load): `--help`
    # itself loads none of the heavy packages either.
    code = ("import runpy, sys; sys.argv = ['agl', '--help']\n"
            "try:\n    runpy.run_module('agl.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch','transformers','mlflow','pandas','matplotlib',"
            "'google.genai','openai','dvc') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"


@pytest.mark.parametrize("protocol", ["paper", "strict"])
def test_scores_out_rows_sum_to_the_whole(tmp_path, capsys, qwen_published, agl1k_manifest, protocol):
    import pandas as pd

    out = tmp_path / "scores.csv"
    r = run_json(capsys, "evaluate", str(qwen_published), "--manifest", str(agl1k_manifest),
                 "--protocol", protocol, "--json", "--bootstrap", "0", "--scores-out", str(out))
    scores = pd.read_csv(out)
    assert len(scores) == r["n"]
    assert scores["distance_km"].mean() == pytest.approx(r["distance_error_km"])


def test_an_empty_predictions_file_is_named_as_empty(tmp_path, capsys):
    """Was: "no prediction matches a clip of the manifest", as if the keys differed."""
    from factories import manifest

    from agl.cli import main
    from agl.dataset.manifest import write_manifest

    write_manifest(manifest([{}]), tmp_path / "manifest.csv")
    empty = tmp_path / "predictions.jsonl"
    empty.write_text("")
    assert main(["evaluate", str(empty), "--manifest", str(tmp_path / "manifest.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"agl evaluate: error: {empty}: holds no prediction record; give a run's predictions.jsonl "
                   "(one record per clip) or an authors' published file"]
