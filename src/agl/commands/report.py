"""`agl report`: one self-contained HTML report over every evaluated run."""

from __future__ import annotations

import argparse

from agl.core.checks import arg_type


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write build/report/report.html: leaderboard, plots, breakdowns, error modes",
        description="Breakdowns, plots and error modes of every evaluated run, in one "
                    "self-contained HTML file (images inlined; opens offline).",
    )
    p.add_argument("--runs", nargs="+", default=["build/runs", "build/paper"],
                   help="folders holding <run>/metrics.json + scores_<protocol>.csv")
    p.add_argument("--leaderboard", default="build/leaderboard.csv")
    p.add_argument("--manifest", default="data/manifest.csv", help="for the data version")
    p.add_argument("--out", default="build/report")
    p.add_argument("--birds", default="build/curation/birds.csv",
                   help="the birds stage's table (BirdNET); the Birds section if it exists")
    p.add_argument("--judges", default="build/judges",
                   help="the judge stage's tables (<run>/error_modes.csv); a run without one gets the "
                        "record's modes only")
    p.add_argument("--params", default="params.yaml",
                   help="read the `report:` section from here (if the file exists)")
    p.add_argument("--protocol", choices=["paper", "strict"])
    p.add_argument("--bootstrap", type=arg_type("count"), help="bootstrap resamples per CI")
    p.add_argument("--judge-backend", help="inference backend for the error-mode judge (judges every run "
                                            "first, into OUT/judges)")
    p.add_argument("--judge-model", help="the judge's model id")
    p.add_argument("--judge-base-url", help="base_url setting for the judge backend")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _report_impl

    return _report_impl.run(args)
