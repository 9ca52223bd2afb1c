"""`agl mlflow [--experiment NAME]`: the link that opens the MLflow experiment on its runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mlflow",
        help="print the link that opens MLflow on the runs table, headline metrics as columns",
        description=(
            "Print the URL that opens the MLflow experiment's runs table on agl's saved view "
            "(the headline metrics as columns, ordered as the leaderboard ranks the runs, "
            "unranked ones last; by mean distance error where no rank was logged), saving "
            "that view again from the metrics the evaluated runs carry. The store is "
            "MLFLOW_TRACKING_URI's, else mlflow.db in the repository; a server's URL is its "
            "own, a database is opened with `mlflow ui` on 127.0.0.1:5000."
        ),
    )
    p.add_argument("--experiment", default=None,
                   help="the experiment (default: the params file's mlflow.experiment, as the "
                   "track stage logs to; else AGL_MLFLOW_EXPERIMENT, else agl1k)")
    p.add_argument("--params", type=Path, default=Path("params.yaml"),
                   help="params file (default: ./params.yaml)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _mlflow_impl

    return _mlflow_impl.run(args)
