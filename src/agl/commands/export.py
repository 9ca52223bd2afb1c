"""`agl export eee`: evaluated runs as Every Eval Ever records (docs/interchange.md)."""

from __future__ import annotations

import argparse
import sys
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
    # Lazy, so that `agl --help` stays instant (this module is imported to build the parser).
    from agl.errors import AglError
    from agl.interchange.eee_export import ExportConfig, export_runs
    from agl.scoring.config import EvaluateConfig

    params = read_params(args.params)
    export, report = params.get("export") or {}, params.get("report") or {}
    # The intervals' fallback as the evaluate stage reads it (one rule: agl.core.checks.PARAMS).
    evaluate = EvaluateConfig.from_params(params.get("evaluate"), source=str(args.params))
    if not args.manifest.is_file():
        raise AglError(f"--manifest {args.manifest}: not found; give the manifest the runs were scored on")
    if not isinstance(export, dict):
        raise AglError(f"{args.params} export: {export!r} is not a mapping; e.g. export: {{organization: agl}}")
    organization = args.organization if args.organization is not None else export.get("organization", "agl")
    if not isinstance(organization, str) or not organization.strip():
        # a list used to be written as its Python text ("['a', 'b']") into every record
        where = "--organization" if args.organization is not None else f"{args.params} export.organization"
        raise AglError(f"{where}: {organization!r} is not one organization's name (text); e.g. "
                       "organization: agl")
    config = ExportConfig(organization=organization.strip(), resamples=evaluate.metric_bootstrap,
                          seed=evaluate.seed,
                          wrong_km=float(report.get("wrong_km", 750.0)))
    roots = list(args.runs) if args.runs else [Path("build/runs"), Path("build/paper")]
    written, notes = export_runs([r for r in roots if r.exists() or args.runs], args.manifest,
                                 args.out, config)
    for note in notes:
        print(f"agl export: note: {note}", file=sys.stderr)
    for path in written:
        print(f"agl export: wrote {path}", file=sys.stderr)
    print(f"agl export: {len(written)} EEE record(s) under {args.out / 'data'}", file=sys.stderr)
    return 0


def read_params(path: Path) -> dict:
    """The params file at `path` ({} where there is none: the defaults hold)."""
    from agl.core.yamlfile import load_yaml  # (lazy, as above)

    return load_yaml(path) if path.is_file() else {}
