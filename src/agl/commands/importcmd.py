"""`agl import SRC --out OUT.jsonl [--reparse]`: the authors' published results as predictions;
`agl import RECORDS --out DIR`: Every Eval Ever records for AGL1K as runs the leaderboard ranks."""

from __future__ import annotations

import argparse
from pathlib import Path

from agl.commands.evaluate import add_source_options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="convert an authors' published result file, or EEE records, into this project's runs",
        description="Convert a published AGL1K result file (JSON list or JSON Lines) into a "
                    "predictions file; or import Every Eval Ever 0.3.0 records for AGL1K (a record "
                    ".json or a folder of them) as runs in OUT/<run>/, scored by this project's "
                    "protocols where their rows carry places (docs/interchange.md).",
    )
    p.add_argument("src", help="published file, e.g. seed_42_progress_fixed.json: a path, an "
                   "http(s) URL, or paper:<name> (e.g. paper:qwen25-omni); or an EEE record "
                   "(.json) or a folder of them")
    p.add_argument("--out", required=True, help="predictions JSON Lines file to write; for EEE "
                   "records the folder of imported runs (the leaderboard stage reads imported/)")
    p.add_argument("--manifest", type=Path, default=Path("data/manifest.csv"),
                   help="EEE records: the manifest to score them on (default: data/manifest.csv)")
    p.add_argument("--params", type=Path, default=Path("params.yaml"),
                   help="EEE records: params file for evaluate.* fallbacks (default: ./params.yaml)")
    p.add_argument("--reparse", action="store_true",
                   help="parse each row's raw model_output with this project's parser")
    add_source_options(p, manifest=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _import_impl

    return _import_impl.run(args)
