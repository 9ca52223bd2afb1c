"""`agl exp`: the experiments DVC knows, one row each, in 120 columns."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from agl.errors import AglError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "exp",
        help="the experiments as a compact table: a row each, the params that differ, each run's headline",
        description=(
            "Read `dvc exp show --json` (it does not replace DVC's command) and print one row per "
            "experiment (workspace, baselines, experiments): the params whose values differ "
            "between the rows, and each run's headline metric (--metric). Fits --width columns; "
            "--wide shows every headline metric and param that differs; --json prints the rows."
        ),
    )
    p.add_argument("--metric", default="mean_km",
                   help="the per-run headline shown (mean_km, median_km, country_acc, ...; default mean_km)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--wide", action="store_true", help="every column, however wide")
    view.add_argument("--json", action="store_true", help="the rows as JSON")
    p.add_argument("--width", type=int, default=120, help="columns to fit (default 120)")
    p.add_argument("--input", type=Path,
                   help="a saved `dvc exp show --json` instead of running it (e.g. from CI)")
    p.add_argument("-A", "--all-commits", action="store_true", help="passed to dvc exp show")
    p.set_defaults(func=run)


def _dvc_json(all_commits: bool) -> list:
    cmd = ["dvc", "exp", "show", "--json", "--no-fetch", *(["-A"] if all_commits else [])]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise AglError("dvc is not installed here: pip install -e . (it is a dependency)") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise AglError(f"`{' '.join(cmd)}` failed: {last}")
    return json.loads(done.stdout or "[]")


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.report.experiments import as_json, rows_from_dvc, table

    if args.width < 40:
        raise AglError(f"--width {args.width}: at least 40 columns")
    if args.input is not None:
        try:
            doc = json.loads(args.input.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AglError(f"--input {args.input}: not a `dvc exp show --json` file ({exc})") from None
    else:
        doc = _dvc_json(args.all_commits)
    if not isinstance(doc, list):
        raise AglError("`dvc exp show --json` gave no list of revisions; is this DVC 3?")
    try:
        rows = rows_from_dvc(doc)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # a hand-edited or foreign file
        where = f"--input {args.input}" if args.input is not None else "`dvc exp show --json`"
        raise AglError(f"{where}: not the shape `dvc exp show --json` writes (DVC 3): "
                       f"{type(exc).__name__}: {exc}") from None
    if args.json:
        json.dump(as_json(rows), sys.stdout, indent=1, default=str)
        print()
        return 0
    print(table(rows, args.metric, None if args.wide else args.width).text())
    return 0
