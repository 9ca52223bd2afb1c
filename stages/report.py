"""Stage report: the last stage; one self-contained HTML report over every evaluated run.

Reads params `report`, `data` (which dataset, for the provenance block), `mlflow` and
`evaluate.max_resamples` (the bound on its resample counts); reads
the judge stage's tables (JUDGES/<run>/error_modes.csv; it calls no model); writes
OUT_DIR/report.html, plots/, tables/, cdf/<run>.csv (for `dvc plots`) and summary.json, and
logs them to MLflow; prints the runs whose served model was flagged (agl.predictions.served:
the flags the report's leaderboard marks, from each run's run_summary.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.report.build import make_report
from agl.report.inputs import ReportConfig, ReportInputs
from agl.scoring.leaderboard import served_lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("leaderboard", type=Path, help="the leaderboard stage's CSV")
    ap.add_argument("manifest", type=Path)
    ap.add_argument("run_dirs", type=Path, nargs="+", help="folders holding <run>/metrics.json")
    ap.add_argument("--judges", type=Path, default=None, help="the judge stage's folder: <run>/error_modes.csv")
    ap.add_argument("--birds", type=Path, default=None, help="the birds stage's table (birds.csv)")
    ap.add_argument("--counterfactual", type=Path, default=None,
                    help="the counterfactual stage's folder: the section 'What the models listen to'")
    ap.add_argument("--sensitivity", type=Path, default=None,
                    help="scripts/sensitivity-sweep's table: the section 'Localizability: "
                         "sensitivity to γ and θ' (skipped while the file does not exist)")
    ap.add_argument("--duplicates", type=Path, default=None,
                    help="the duplicates stage's table: each pair of clips is one cluster")
    ap.add_argument("--speech", type=Path, default=None,
                    help="the speech stage's table (speech.csv): the section 'What language alone tells'")
    args = ap.parse_args(argv)
    p = _params.load("report", "data", "mlflow", "evaluate.max_resamples")
    config = ReportConfig.from_params(p["report"], experiment=p["mlflow"].get("experiment"),
                                      max_resamples=p["evaluate.max_resamples"])
    inputs = ReportInputs(
        run_dirs=tuple(args.run_dirs), leaderboard_csv=args.leaderboard, manifest=args.manifest,
        judges_dir=args.judges, birds_csv=args.birds, counterfactual_dir=args.counterfactual,
        sensitivity_csv=args.sensitivity, speech_csv=args.speech, duplicates_csv=args.duplicates,
        extra_provenance={"params data.dataset": p["data"]["dataset"]})
    summary = make_report(inputs, args.out_dir, config)
    # Runs served by another model than asked (marked in the report's leaderboard): said here too.
    runs = sorted(f for d in args.run_dirs for f in d.glob("*/metrics.json"))
    for run, flags in served_lines(runs).items():
        print(f"WARNING served model: {run}: " + "; ".join(flags))
    print(f"wrote {summary['html']} ({len(summary['runs'])} runs)")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
