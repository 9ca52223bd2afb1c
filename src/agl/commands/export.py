"""`agl export eee`: evaluated runs as Every Eval Ever records (docs/interchange.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write evaluated runs in an interchange format (eee: Every Eval Ever 0.3.0)",
        description=(
            "Write every evaluated run (<run>/metrics.json) as an Every Eval Ever 0.3.0 "
            "aggregate record with its per-clip rows, in the EEE datastore's layout "
            "(OUT/data/<collection>/<developer>/<model>/<uuid>.json and <uuid>_samples.jsonl). "
            "The same inputs give the same bytes: ids and timestamps come from the runs."
        ),
    )
    p.add_argument("format", choices=("eee",), help="eee: Every Eval Ever 0.3.0")
    p.add_argument("--runs", type=Path, nargs="+", default=None, metavar="DIR",
                   help="folders holding <run>/metrics.json (default: build/runs build/paper)")
    p.add_argument("--manifest", type=Path, default=Path("data/manifest.csv"),
                   help="the manifest the runs were scored on (default: data/manifest.csv)")
    p.add_argument("--out", type=Path, required=True, help="folder to write data/... under")
    p.add_argument("--organization", default=None,
                   help="who publishes the records (default: params.yaml export.organization, else agl)")
    p.add_argument("--params", type=Path, default=Path("params.yaml"),
                   help="params file for the intervals' fallback and export.* (default: ./params.yaml)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _export_impl

    return _export_impl.run(args)
