"""The work of `agl export` (agl.commands.export registers the command and imports this
module when it runs), and the params reading `agl import` shares with it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agl.core.yamlfile import load_yaml
from agl.errors import AglError
from agl.interchange.eee_export import ExportConfig, export_runs
from agl.scoring.config import EvaluateConfig


def run(args: argparse.Namespace) -> int:
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
    return load_yaml(path) if path.is_file() else {}
