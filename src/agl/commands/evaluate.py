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
    p.add_argument("predictions", help="predictions JSONL, or an authors' published .json/.jsonl; "
                   "a path, an http(s) URL, or paper:<name> (e.g. paper:qwen25-omni)")
    p.add_argument("--manifest", required=True,
                   help="manifest CSV (AGL1K layout): a path, an http(s) URL, or paper:manifest")
    p.add_argument("--protocol", choices=["paper", "strict"], default="paper")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--reparse", action="store_true",
                   help="for published files: reparse the raw replies with this project's parser")
    p.add_argument("--scores-out", help="write the per-clip score table (CSV) here")
    add_source_options(p)
    p.set_defaults(func=run)


def add_source_options(p: argparse.ArgumentParser, *, manifest: bool = True) -> None:
    """Checksums and cache for inputs given as URLs or paper:<name> (see agl.dataset.sources)."""
    p.add_argument("--sha256", help="expected SHA-256 of the predictions file (refused if it "
                   "differs); pinned files are checked without it")
    if manifest:
        p.add_argument("--manifest-sha256", help="expected SHA-256 of the manifest")
    p.add_argument("--cache-dir", default="cache/sources",
                   help="where downloaded inputs are kept (default: cache/sources)")


def run(args: argparse.Namespace) -> int:
    from agl.core.jsonutil import dumps
    from agl.core.outpaths import input_file, output_file
    from agl.dataset.sources import resolve_source
    from agl.scoring.evaluate import evaluate_files
    from agl.scoring.text import metrics_table

    if args.scores_out:
        output_file(args.scores_out, "--scores-out")
    if args.bootstrap < 0:
        from agl.errors import AglError

        raise AglError(f"--bootstrap must be 0 or more, got {args.bootstrap}")
    if args.seed < 0:  # numpy's generators take non-negative seeds only
        from agl.errors import AglError

        raise AglError(f"--seed must be 0 or more, got {args.seed}")
    predictions = resolve_source(args.predictions, cache_dir=args.cache_dir, sha256=args.sha256)
    manifest = resolve_source(args.manifest, cache_dir=args.cache_dir,
                              sha256=args.manifest_sha256)
    input_file(predictions, "predictions", "predictions")
    input_file(manifest, "--manifest", "manifest CSV")
    result, scored = evaluate_files(
        predictions, manifest, args.protocol,
        bootstrap=args.bootstrap, seed=args.seed, reparse=args.reparse,
    )
    for w in result.pop("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    if args.scores_out:
        from pathlib import Path

        Path(args.scores_out).parent.mkdir(parents=True, exist_ok=True)
        scored.to_csv(args.scores_out, index=False)
    if args.json:
        print(dumps(result, indent=2))
    else:
        print(metrics_table(result, title=f"{args.predictions} ({args.protocol} protocol)"))
    return 0

