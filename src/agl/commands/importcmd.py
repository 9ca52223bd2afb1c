"""`agl import SRC --out OUT.jsonl [--reparse]`: the authors' published results as predictions;
`agl import RECORDS --out DIR`: Every Eval Ever records for AGL1K as runs the leaderboard ranks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


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
    from agl.interchange.eee_import import is_eee  # a command's lazy load

    return is_eee(Path(src))


def _import_eee(args: argparse.Namespace) -> int:
    from agl.commands.export import read_params  # the same params reading as `agl export`
    from agl.errors import AglError  # lazy: `agl --help` imports every command module
    from agl.interchange.eee_import import ImportConfig, import_records  # (as above)
    from agl.scoring.config import EvaluateConfig  # (as above)

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
