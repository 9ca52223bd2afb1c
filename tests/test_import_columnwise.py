"""The column-wise import of published files gives exactly what the per-row import gave (on
the authors' Qwen2.5-Omni file and on generated edge cases), and bad published files get one
clear line and a non-zero exit."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from agl.cli import main
from agl.predictions.importer import from_published_row, import_published, published_frame, read_published
from agl.predictions.records import prediction_frame

# Every value a published field was seen to hold, and the odd ones a file could hold.
ODD_VALUES = [
    None,
    "",
    " ",
    "Unknown",
    " unknown ",
    "UNKNOWN",
    "0",
    0,
    0.0,
    -0.0,
    "0.0",
    "-1",
    -1,
    -1.0,
    "N/A",
    "na",
    "none",
    "null",
    "?",
    "-",
    "nan",
    math.nan,
    "inf",
    math.inf,
    True,
    False,
    "51.5",
    " 51.5 ",
    51.5,
    90,
    90.0001,
    "91",
    -180,
    180.0,
    180.5,
    "-33.87",
    "abc",
    "1e1",
    1e-7,
    [1, 2],
    {"a": 1},
    12,
    "  Paris ",
    "Paris",
    "São Paulo",
    "Not specified",
    "cannot determine",
]


def _canon(predictions) -> list[str]:
    return [json.dumps(p.to_json(), sort_keys=True, default=str) for p in predictions]


def _edge_rows(n: int = 3000, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        pick = [ODD_VALUES[j] for j in rng.integers(0, len(ODD_VALUES), 5)]
        if i % 7 == 0:  # realistic rows too: a real answer, and the authors' 0,0 refusal
            pick = ["Lima", "Peru", "South America", -12.05, -77.04] if i % 2 else ["Unknown"] * 3 + [0.0, 0.0]
        rows.append(
            {
                "question_id": f"clip_{i}" if i % 5 else i,  # ints as keys too
                "predicted_city": pick[0],
                "predicted_country": pick[1],
                "predicted_continent": pick[2],
                "predicted_latitude": pick[3],
                "predicted_longitude": pick[4],
                "reasoning": ["No reasoning provided", "", "bells", None][i % 4],
                "model_output": ["", "x", None][i % 3],
            }
        )
    return rows


def _assert_same(path):
    rows = read_published(path)
    old = [from_published_row(r) for r in rows]
    assert _canon(import_published(path)) == _canon(old)
    pd.testing.assert_frame_equal(published_frame(path), prediction_frame(old))


def test_qwen_file_imports_identically(qwen_published):
    _assert_same(qwen_published)


@pytest.mark.parametrize("shape", ["list", "lines"])
def test_edge_cases_import_identically(tmp_path, shape):
    rows = _edge_rows()
    path = tmp_path / ("p.json" if shape == "list" else "p.jsonl")
    if shape == "list":
        path.write_text(json.dumps(rows), encoding="utf-8")  # NaN/Infinity as Python's json writes them
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _assert_same(path)


def _run(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary", "not UTF-8"),
        (b"", "no rows"),
        (b"   \n", "no rows"),
        (b"[]", "no rows"),
        (
            b'[{"question_id": null, "predicted_city": "x", "predicted_country": "y", '
            b'"predicted_continent": "z", "predicted_latitude": 1, "predicted_longitude": 2}]',
            "row 1: question_id is null",
        ),
        (
            b'{"question_id": "a", "model_output": "x"}\n{"question_id": null, "model_output": "x"}\n',
            "row 2: question_id is null",
        ),
        (b'[{"question_id": "a"', "not valid JSON"),
    ],
)
def test_bad_published_files_get_one_line(tmp_path, capsys, content, says):
    src = tmp_path / "published.json"
    src.write_bytes(content)
    out = tmp_path / "out" / "run.jsonl"
    code, err = _run(["import", str(src), "--out", str(out)], capsys)
    assert code != 0 and len(err) == 1 and says in err[0] and str(src) in err[0], err
    assert not out.exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_out_as_a_folder_is_one_line_and_leaves_nothing(tmp_path, capsys, qwen_published):
    src = qwen_published
    folder = tmp_path / "runs"
    folder.mkdir()
    code, err = _run(["import", str(src), "--out", str(folder)], capsys)
    assert code != 0 and len(err) == 1 and "is a folder" in err[0]
    assert list(folder.iterdir()) == [] and not list(tmp_path.glob("*.tmp"))


def test_import_writes_atomically_and_leaves_no_temporary(tmp_path, capsys, qwen_published):
    out = tmp_path / "run.jsonl"
    code, err = _run(["import", str(qwen_published), "--out", str(out)], capsys)
    assert code == 0 and "imported 1442 row(s)" in err[0]
    assert len(out.read_text().splitlines()) == 1442
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_one_json_object_over_many_lines_is_named_not_called_invalid(tmp_path):
    """`agl import build/runs/knn/metrics.json` said "line 1: not valid JSON": read as JSON Lines,
    its first line is `{`. A whole JSON object is named as what it is; JSON Lines still read."""
    from agl.errors import AglError
    from agl.predictions.importer import read_published

    doc = tmp_path / "metrics.json"
    doc.write_text('{\n "run": "knn",\n "protocols": {}\n}\n')
    with pytest.raises(AglError, match=r"metrics\.json: one JSON object over 4 lines, not a result file"):
        read_published(doc)
    lines = tmp_path / "rows.jsonl"
    lines.write_text('{"question_id": "a", "model_output": "x"}\n{"question_id": "b", "model_output": "y"}\n')
    assert [r["question_id"] for r in read_published(lines)] == ["a", "b"]


def test_an_api_error_reply_is_a_failed_clip_not_a_refusal(shared, agl1k_manifest):
    """The Gemini 3 Pro subset: 5 of its 8 rejected rows are the authors' `error` replies (the
    API call failed). They are failed clips in every count of this project (status, the
    failure rate), refusals nowhere but in the paper's own reject rate (its rule, unchanged)."""
    import warnings

    from agl.scoring.evaluate import evaluate_files

    path = shared("data/agl1k/published/gemini-3-pro-preview/seed_42_ABCD.jsonl")
    frame = published_frame(path)
    errors = {json.loads(line)["question_id"] for line in open(path, encoding="utf-8")
              if json.loads(line).get("model_output") == "error"}
    assert len(errors) == 5
    assert set(frame.loc[frame["status"] == "failed", "sample_id"]) == {str(e) for e in errors}
    by_row = [from_published_row(r) for r in read_published(path)]
    assert [p.status.value for p in by_row] == frame["status"].tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, _ = evaluate_files(path, agl1k_manifest, "paper", bootstrap=0)
    assert (res["n_refused"], res["n_rejected"]) == (3, 8)  # the paper's reject rate: 8 / 263
    assert res["failure_rate"] == pytest.approx(5 / 263)
