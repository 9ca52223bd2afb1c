"""Every Eval Ever 0.3.0 records out (`agl export eee`) and in (`agl import`): every record valid
against the schema files in ../shared, identical bytes on a second export, the authors'
Qwen2.5-Omni run through export and import with the same leaderboard numbers, and a
corrupted record refused in one line naming its field (docs/interchange.md)."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import fastjsonschema
import jsonschema
import pandas as pd
import pytest
from factories import manifest, prediction

from agl.cli import main
from agl.dataset.manifest import ManifestWarning
from agl.interchange.eee_export import ExportConfig, export_runs
from agl.interchange.eee_import import ImportConfig, import_records
from agl.predictions.importer import import_with_report
from agl.predictions.records import Status, write_predictions
from agl.scoring import leaderboard
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import evaluate_run

EEE = "data/every-eval-ever-0.3.0"
REPO = Path(__file__).resolve().parents[1]
COMPARED = ("n", "clips_predicted", "dataset_clips", "data_version", *(
    f"{c}{s}" for c in leaderboard.COLUMNS for s in ("", "_lo", "_hi")))


@pytest.fixture(scope="module")
def validators(shared):
    """The two schema files as published (../shared), not the copies agl ships: the reference
    validator (`jsonschema`), and the same schema compiled (`fastjsonschema`, ~20x faster)
    for the thousands of instance rows of a run."""
    out = {}
    for name in ("eval.schema.json", "instance_level_eval.schema.json"):
        schema = json.loads(shared(f"{EEE}/{name}").read_text())
        out[name] = jsonschema.Draft7Validator(schema)
        out[f"fast {name}"] = fastjsonschema.compile(schema, use_default=False)
    return out


def validate_all(folder: Path, validators) -> int:
    """Every aggregate record and every instance row under `folder`, against ../shared's
    schemas (the first error fails the test): the records and one row of each result and
    status by the reference validator, every row by the compiled one; returns the number of
    records."""
    records = sorted(folder.rglob("*.json"))
    for path in records:
        doc = json.loads(path.read_text())
        validators["eval.schema.json"].validate(doc)
        samples = folder / doc["detailed_evaluation_results"]["file_path"]
        assert samples.is_file() and samples.parent == path.parent
        raw = samples.read_bytes()
        assert hashlib.sha256(raw).hexdigest() == doc["detailed_evaluation_results"]["checksum"]
        rows = [json.loads(line) for line in raw.decode().splitlines()]
        assert len(rows) == doc["detailed_evaluation_results"]["total_rows"] > 0
        ids = {r["evaluation_result_id"] for r in doc["evaluation_results"]}
        kinds = {}
        for row in rows:
            kinds.setdefault((row["evaluation_result_id"], row["metadata"]["status"]), row)
            validators["fast instance_level_eval.schema.json"](row)
            assert row["evaluation_id"] == doc["evaluation_id"] and row["evaluation_result_id"] in ids
        for row in kinds.values():
            validators["instance_level_eval.schema.json"].validate(row)
    return len(records)


def same_bytes(a: Path, b: Path) -> None:
    """Two export folders hold the same files, byte for byte."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_shipped_schemas_are_the_published_files(shared):
    for ours, theirs in (("eee_eval.schema.json", "eval.schema.json"),
                         ("eee_instance_level_eval.schema.json", "instance_level_eval.schema.json")):
        assert (REPO / "src/agl/data" / ours).read_bytes() == shared(f"{EEE}/{theirs}").read_bytes()


@pytest.fixture(scope="module")
def qwen_run(tmp_path_factory, qwen_published, agl1k_manifest) -> Path:
    """The authors' Qwen2.5-Omni run as the paper stage leaves it (build/paper/qwen25-omni)."""
    root = tmp_path_factory.mktemp("paper")
    out = root / "qwen25-omni"
    predictions, _ = import_with_report(qwen_published)
    write_predictions(out / "predictions.jsonl", predictions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the manifest's repair, the two clips it lacks
        evaluate_run("paper/qwen25-omni", out / "predictions.jsonl", agl1k_manifest, out,
                     EvaluateConfig(metric_bootstrap=200, track=False),
                     info={"model": "qwen25-omni", "backend": "replay", "source": "published",
                           "paper_name": "Qwen2.5-Omni",
                           "published_path": "results/audio_localization/qwen25-omni/x.json"})
    return root


def test_qwen_export_is_valid_and_survives_a_round_trip(tmp_path, qwen_run, agl1k_manifest, validators):
    config = ExportConfig(resamples=200)
    written, _ = export_runs([qwen_run], agl1k_manifest, tmp_path / "eee", config)
    assert validate_all(tmp_path / "eee", validators) == 1
    (path,) = written
    assert path.parent.relative_to(tmp_path / "eee") == Path("data/agl1k/Qwen/Qwen2.5-Omni-7B")
    doc = json.loads(path.read_text())
    assert doc["source_metadata"]["source_type"] == "documentation"
    assert doc["source_metadata"]["evaluator_relationship"] == "third_party"
    assert doc["model_info"]["additional_details"]["model_availability"] == "open_weights"
    by_id = {r["evaluation_result_id"]: r for r in doc["evaluation_results"]}
    paper = by_id["paper.distance_error_km"]["score_details"]
    assert round(paper["score"], 2) == 5476.83  # the paper's row
    assert paper["uncertainty"]["num_bootstrap_samples"] == 200
    # The interval is the one metrics.json (agl evaluate) drew, named by the unit it drew it
    # with; the clip interval stands beside it under its own name (it was exported as `clip`).
    scored = json.loads((qwen_run / "qwen25-omni" / "metrics.json").read_text())["protocols"]["paper"]
    assert scored["resampling_unit"] == paper["details"]["resampling_unit"] == "site:25"
    ci = paper["uncertainty"]["confidence_interval"]
    assert [ci["lower"], ci["upper"]] == scored["ci95"]["distance_error_km"]
    assert ci["method"] == "percentile bootstrap over site:25 clusters"
    clip = [float(paper["details"][f"clip_ci95_{e}"]) for e in ("lower", "upper")]
    assert clip == scored["ci95_clip"]["distance_error_km"] != scored["ci95"]["distance_error_km"]
    assert {"strict.distance_error_km", "strict.city_acc"} <= set(by_id)
    # Imported as a third party's record: the leaderboard shows the same numbers for both.
    with pytest.warns(UserWarning, match="1442 of 1444 clips"):  # as the authors published it
        ((folder, notes),) = import_records(path, agl1k_manifest, tmp_path / "imported", ImportConfig())
    assert notes == []
    for protocol in ("paper", "strict"):
        board = leaderboard.collect([qwen_run / "qwen25-omni" / "metrics.json", folder / "metrics.json"],
                                    protocol)
        ours = board[board["run"] == "paper/qwen25-omni"].iloc[0]
        theirs = board[board["run"] != "paper/qwen25-omni"].iloc[0]
        assert theirs["run"].startswith("eee/") and theirs["source"].startswith("EEE record by AGL1K authors")
        for c in COMPARED:
            assert ours[c] == theirs[c] or (pd.isna(ours[c]) and pd.isna(theirs[c])), (protocol, c)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A small synthetic-set run of a baseline (factories), evaluated: (runs root, manifest)."""
    root = tmp_path_factory.mktemp("synthetic")
    frame = manifest([{"key": f"s{i}", "title": f"SYNTHETIC clip {i}", "latitude": 10.0 * i,
                       "longitude": 5.0 * i, "city": "Lyon" if i % 2 else "Paris"} for i in range(8)])
    path = root / "manifest.csv"
    frame.to_csv(path, index=False)
    preds = [prediction(f"s{i}", 10.0 * i + 1, 5.0 * i, "Paris", "France", "Europe",
                        raw_reply=f"reply {i}", meta={"input_tokens": 10, "output_tokens": 5})
             for i in range(7)] + [prediction("s7", status=Status.REFUSED, refused=True)]
    run = root / "runs" / "knn"
    write_predictions(run / "predictions.jsonl", preds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        evaluate_run("knn", run / "predictions.jsonl", path, run, EvaluateConfig(metric_bootstrap=50, track=False),
                     info={"model": "logmel-stats", "backend": "knn", "run_fingerprint": "f00d"})
    return root / "runs", path


def test_a_synthetic_baseline_run(tmp_path, synthetic, validators):
    runs, path = synthetic
    (written,), _ = export_runs([runs], path, tmp_path, ExportConfig(resamples=50))
    assert validate_all(tmp_path, validators) == 1
    assert written.parent.relative_to(tmp_path) == Path("data/agl1k-synthetic-demo/agl/logmel-stats")
    doc = json.loads(written.read_text())
    assert doc["source_metadata"] == {**doc["source_metadata"], "source_type": "evaluation_run",
                                      "evaluator_relationship": "first_party"}
    assert doc["evaluation_results"][0]["source_data"]["additional_details"]["synthetic"] == "true"
    # the country by recording place and the levels from the predicted point (agl.scoring.labels)
    ids = {r["evaluation_result_id"] for r in doc["evaluation_results"]}
    assert {"paper.country_point_acc", "paper.admin1_acc", "paper.city_point_acc"} <= ids
    rows = [json.loads(x) for x in (written.parent / f"{written.stem}_samples.jsonl").read_text().splitlines()]
    assert {r["sample_id"] for r in rows} == {f"s{i}" for i in range(8)}
    assert rows[0]["token_usage"] == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    export_runs([runs], path, tmp_path / "again", ExportConfig(resamples=50))  # twice: same bytes
    same_bytes(tmp_path / "data", tmp_path / "again" / "data")


@pytest.fixture(scope="module")
def record(tmp_path_factory, synthetic) -> Path:
    runs, path = synthetic
    out = tmp_path_factory.mktemp("record")
    (written,), _ = export_runs([runs], path, out, ExportConfig(resamples=50))
    return written


def _corrupt(tmp_path: Path, record: Path, change) -> Path:
    doc = json.loads(record.read_text())
    change(doc)
    bad = tmp_path / "bad" / record.name
    bad.parent.mkdir()
    bad.write_text(json.dumps(doc))
    samples = record.with_name(f"{record.stem}_samples.jsonl")
    (bad.parent / samples.name).write_bytes(samples.read_bytes())
    return bad


def _drop_id(doc):
    del doc["evaluation_id"]


def _text_score(doc):
    doc["evaluation_results"][2]["score_details"]["score"] = "0.5"


def _no_method(doc):
    del doc["evaluation_results"][0]["score_details"]["uncertainty"]["confidence_interval"]["method"]


def _other_benchmark(doc):
    doc["evaluation_results"][1]["source_data"]["dataset_name"] = "MMLU"


@pytest.mark.parametrize("change, field", [
    (_drop_id, "evaluation_id: required field missing"),
    (_text_score, "evaluation_results[2].score_details.score: '0.5' is not of type 'number'"),
    (_no_method, "evaluation_results[0].score_details.uncertainty.confidence_interval.method"),
    (_other_benchmark, "evaluation_results[1].source_data.dataset_name 'MMLU': not AGL1K"),
])
def test_a_corrupted_record_is_one_line_naming_its_field(tmp_path, capsys, record, synthetic, change, field):
    bad = _corrupt(tmp_path, record, change)
    code = main(["import", str(bad), "--out", str(tmp_path / "imported"), "--manifest", str(synthetic[1]),
                 "--params", str(tmp_path / "none.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and field in err, err
    assert not (tmp_path / "imported").exists()  # nothing half-imported


def test_a_record_without_places_is_ranked_as_stated(tmp_path, capsys, record, synthetic):
    """Rows dropped: the record's own numbers join the board, marked with its source."""
    doc = json.loads(record.read_text())
    del doc["detailed_evaluation_results"]
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert main(["import", str(tmp_path / "r.json"), "--out", str(tmp_path / "imp"),
                 "--manifest", str(synthetic[1]), "--params", str(tmp_path / "none.yaml")]) == 0
    (folder,) = (tmp_path / "imp").iterdir()
    board = leaderboard.collect([synthetic[0] / "knn" / "metrics.json", folder / "metrics.json"], "paper")
    assert board["distance_error_km"].nunique() == 1 and board["distance_error_km_hi"].nunique() == 1
    assert "Every Eval Ever" in " ".join(leaderboard.table_notes(board))
