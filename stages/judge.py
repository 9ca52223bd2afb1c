"""Stage judge@<run>: the error-mode judge reads one evaluated run's wrong predictions.

Reads params `report.protocol`, `report.wrong_km` (which predictions are wrong, the report's
rule) and `report.judge` (the judge model; null: none). Writes OUT_CSV: one row per wrong
prediction with its mode (`agl.judges.error_modes`); the report stage reads it. Without a
judge no model is called and the table holds the record's Refusal / Failure and "Unjudged".
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.judges.error_modes import ErrorModeJudgeConfig, judge_run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir", type=Path, help="the evaluated run: scores_<protocol>.csv, predictions.jsonl")
    ap.add_argument("out_csv", type=Path, help="the judge's table (error_modes.csv)")
    args = ap.parse_args(argv)
    p = _params.load("report.protocol", "report.wrong_km")
    judge = _params.load("report.judge", required=False)["report.judge"]
    config = ErrorModeJudgeConfig.from_params(p["report.protocol"], p["report.wrong_km"], judge)
    frame = judge_run(args.run_dir, args.out_csv, config)
    who = "no judge" if config.judge is None else f"judge {config.judge.backend}/{config.judge.model}"
    print(f"wrote {args.out_csv} ({len(frame)} wrong predictions; {who})")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
