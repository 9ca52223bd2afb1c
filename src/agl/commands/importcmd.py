"""`agl import SRC --out OUT.jsonl [--reparse]`: the authors' published results as predictions."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="convert an authors' published result file into this project's predictions format",
        description="Convert a published AGL1K result file (JSON list or JSON Lines).",
    )
    p.add_argument("src", help="published file, e.g. seed_42_progress_fixed.json: a path, an "
                   "http(s) URL, or paper:<name> (e.g. paper:qwen25-omni)")
    p.add_argument("--out", required=True, help="predictions JSON Lines file to write")
    p.add_argument("--reparse", action="store_true",
                   help="parse each row's raw model_output with this project's parser")
    from agl.commands.evaluate import add_source_options  # lazy: `agl --help` imports every command module

    add_source_options(p, manifest=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agl.commands.evaluate import source_config  # the same bounds as `agl evaluate`
    from agl.dataset.sources import resolve_source  # lazy: `agl --help` imports every command module
    from agl.predictions.importer import (  # lazy: `agl --help` imports every command module
        import_with_report,
        write_imported,
    )

    src = resolve_source(args.src, cache_dir=args.cache_dir, sha256=args.sha256,
                         config=source_config(args, args.src))
    predictions, report = import_with_report(src, reparse=args.reparse)
    write_imported(args.out, predictions)
    print(f"{report.line()} -> {args.out}", file=sys.stderr)
    if args.reparse and report.without_raw_text:
        print(f"warning: {report.without_raw_text} of {report.rows} row(s) had no raw "
              "model_output and are written as unparseable", file=sys.stderr)
    return 0
