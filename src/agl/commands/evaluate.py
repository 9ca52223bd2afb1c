"""`agl evaluate PREDICTIONS --manifest MANIFEST [--protocol paper|strict] [--json]`."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score a predictions file (this project's or the authors' published) against a manifest",
        description="Score predictions against a manifest under a named protocol.",
    )
    p.add_argument("predictions", help="predictions JSONL, or an authors' published .json/.jsonl")
    p.add_argument("--manifest", required=True, help="manifest CSV (AGL1K layout)")
    p.add_argument("--protocol", choices=["paper", "strict"], default="paper")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--reparse", action="store_true",
                   help="for published files: reparse the raw replies with this project's parser")
    p.add_argument("--scores-out", help="write the per-clip score table (CSV) here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agl.evaluate import evaluate_files
    from agl.jsonutil import dumps
    from agl.report_text import metrics_table

    result, scored = evaluate_files(
        args.predictions, args.manifest, args.protocol,
        bootstrap=args.bootstrap, seed=args.seed, reparse=args.reparse,
    )
    for w in result.pop("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    if args.scores_out:
        scored.to_csv(args.scores_out, index=False)
    if args.json:
        print(dumps(result, indent=2))
    else:
        print(metrics_table(result, title=f"{args.predictions} ({args.protocol} protocol)"))
    return 0

