"""Stage judge: the error-mode judge reads every evaluated run's wrong predictions.

Reads params `report.protocol`, `report.wrong_km` (which predictions are wrong, the report's
rule) and `report.judge` (the judge model; null: none). Writes OUT_DIR/<run>/error_modes.csv
for each run under RUNS (`agl.judges.error_modes.judge_runs`): one row per wrong prediction
with its mode; the report stage reads them. Without a judge no model is called and each table
holds the record's Refusal / Failure and "Unjudged". One stage for all runs, not one per
model: a stage per model was DVC's growth term (every stage rewrites the whole dvc.lock), and
the judge's reply cache (`report.judge.cache_dir`, default cache/judges) means a rerun after a
new or changed run asks the judge only about what it has not read before.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.judges.error_modes import ErrorModeJudgeConfig, judge_runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", type=Path, help="the evaluated runs: <run>/scores_<protocol>.csv, predictions.jsonl")
    ap.add_argument("out_dir", type=Path, help="the judge's tables: <run>/error_modes.csv")
    args = ap.parse_args(argv)
    p = _params.load("report.protocol", "report.wrong_km")
    judge = _params.load("report.judge", required=False)["report.judge"]
    config = ErrorModeJudgeConfig.from_params(p["report.protocol"], p["report.wrong_km"], judge)
    written = judge_runs([args.runs], args.out_dir, config)
    who = "no judge" if config.judge is None else f"judge {config.judge.backend}/{config.judge.model}"
    print(f"wrote {len(written)} table(s) under {args.out_dir} ({who})")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
