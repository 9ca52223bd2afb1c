"""One name per count (docs/metrics.md#three-counts): for the authors' Qwen2.5-Omni file,
refused (the record's status) 322, no coordinates (scored 10,000 km) 385, rejected (any field
refused: the reject rate) 448, each printed under its own name wherever it appears."""

import json

import pandas as pd
import pytest

from agl.cli import main
from agl.predictions.importer import import_with_report
from agl.predictions.records import write_predictions
from agl.scoring import leaderboard
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import evaluate_run
from agl.scoring.text import run_lines

COUNTS = {"n_refused": 322, "n_no_coordinates": 385, "n_rejected": 448}


def test_evaluate_prints_the_three_counts_by_name(capsys, qwen_published, agl1k_manifest):
    assert main(["evaluate", str(qwen_published), "--manifest", str(agl1k_manifest),
                 "--bootstrap", "0", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {k: r[k] for k in COUNTS} == COUNTS
    assert round(r["reject_rate"] * r["n"]) == r["n_rejected"]  # the reject rate's numerator
    # the speech split partitions every count
    parts = r["by_speech"].values()
    assert {k: sum(p[k] for p in parts) for k in COUNTS} == COUNTS
    assert main(["evaluate", str(qwen_published), "--manifest", str(agl1k_manifest),
                 "--bootstrap", "0"]) == 0
    assert ("clips refused 322 (the model declined), no coordinates 385 (scored 10,000 km), "
            "rejected 448 (any field refused: the reject rate)") in capsys.readouterr().out


def test_paper_run_metrics_and_leaderboard_name_each_count(tmp_path, qwen_published, agl1k_manifest):
    """What the paper stage does with the file (import, evaluate_run), then the leaderboard:
    the 10,000 km sentence counts the clips without coordinates, not the rejected ones."""
    predictions, report = import_with_report(qwen_published)
    assert "refused 322" in report.line()  # the import counts statuses: refused is one
    run_dir = tmp_path / "paper" / "qwen25-omni"
    write_predictions(run_dir / "predictions.jsonl", predictions)
    with pytest.warns(UserWarning, match="predictions for 1442 of 1444 clips"):
        doc = evaluate_run("paper/qwen25-omni", run_dir / "predictions.jsonl", agl1k_manifest, run_dir,
                           EvaluateConfig(protocols=("paper",), intervals=False, track=False),
                           info={"model": "Qwen2.5-Omni", "source": "published"})
    metrics = json.loads((run_dir / "metrics.json").read_text())["protocols"]["paper"]
    assert {k: metrics[k] for k in COUNTS} == COUNTS
    assert "refused 322, no coordinates 385, rejected 448" in run_lines(doc)[0]

    board = leaderboard.collect([run_dir / "metrics.json"], "paper", full_coverage=0.99)
    leaderboard.write(leaderboard.attach_paper(board, None), tmp_path / "out", protocol="paper")
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| 1 (31% rejected) | paper/qwen25-omni |" in md
    assert ("paper/qwen25-omni rejected 448 of 1442 clips, 385 of them without coordinates): the "
            "paper protocol scores a clip without coordinates as 10,000 km") in md
    assert "refused 448" not in md
    csv = pd.read_csv(tmp_path / "out" / "leaderboard.csv").iloc[0]
    assert {k: int(csv[k]) for k in COUNTS} == COUNTS
