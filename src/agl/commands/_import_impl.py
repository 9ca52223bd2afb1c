"""The work of `agl import` (agl.commands.importcmd registers the command and imports this
module when it runs): an authors' published file as predictions, or EEE records as runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agl.commands._export_impl import read_params  # the same params reading as `agl export`
from agl.commands._sources import source_config  # the same bounds as `agl evaluate`
from agl.dataset.sources import resolve_source
from agl.errors import AglError
from agl.interchange.eee_import import ImportConfig, import_records, is_eee
from agl.predictions.importer import import_with_report, write_imported
from agl.scoring.config import EvaluateConfig


def run(args: argparse.Namespace) -> int:
    if _is_eee(args.src):
        return _import_eee(args)
    src = resolve_source(args.src, cache_dir=args.cache_dir, sha256=args.sha256,
                         config=source_config(args, args.src))
    predictions, report = import_with_report(src, reparse=args.reparse)
    write_imported(args.out, predictions)
    print(f"{report.line()} -> {args.out}", file=sys.stderr)
    if args.reparse and report.without_raw_text:
        print(f"warning: {report.without_raw_text} of {report.rows} row(s) had no raw "
              "model_output and are written as unparseable", file=sys.stderr)
    return 0


def _is_eee(src: str) -> bool:
    return is_eee(Path(src))


def _import_eee(args: argparse.Namespace) -> int:
    if args.reparse:
        raise AglError("--reparse re-reads an authors' raw replies; EEE records are imported as "
                       "their extracted values: run the same command without --reparse")
    if not args.manifest.is_file():
        raise AglError(f"--manifest {args.manifest}: not found; give the AGL1K manifest to score on")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise AglError(f"--out {args.out}: a file; EEE records are imported into a folder (e.g. imported)")
    # The fallbacks as the evaluate stage reads them (one rule: agl.core.checks.PARAMS).
    evaluate = EvaluateConfig.from_params(read_params(args.params).get("evaluate"), source=str(args.params))
    config = ImportConfig(resamples=evaluate.metric_bootstrap, max_resamples=evaluate.max_resamples,
                          seed=evaluate.seed, strict_refusal_km=evaluate.strict_refusal_km)
    done = import_records(Path(args.src), args.manifest, Path(args.out), config)
    for folder, notes in done:
        for note in notes:
            print(f"agl import: warning: {note}", file=sys.stderr)
        print(f"agl import: {folder / 'metrics.json'}", file=sys.stderr)
    print(f"agl import: {len(done)} EEE record(s) imported under {args.out}", file=sys.stderr)
    return 0
