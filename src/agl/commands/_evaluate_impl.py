"""The work of `agl evaluate` (agl.commands.evaluate registers the command and imports this
module when it runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agl.commands._sources import source_config
from agl.core.checks import check_count_flag
from agl.core.diskwrite import replace_atomically
from agl.core.jsonutil import dumps
from agl.core.outpaths import input_file, output_file
from agl.dataset.sources import resolve_source
from agl.scoring.clusters import DEFAULT_UNIT, cluster_labels, parse_unit
from agl.scoring.config import BOOTSTRAP, METRIC_BOOTSTRAP
from agl.scoring.evaluate import evaluate_files
from agl.scoring.groups import GroupSpec, by_group, groups_lines
from agl.scoring.labels import Labelling, check_land
from agl.scoring.text import metrics_table


def run(args: argparse.Namespace) -> int:
    check_count_flag("--bootstrap", args.bootstrap, 0)  # before any download or scoring
    point_land = check_land(None if args.point_land == "none" else args.point_land, "--point-land")
    unit = parse_unit(args.unit or DEFAULT_UNIT, "--unit").name
    if args.scores_out:
        output_file(args.scores_out, "--scores-out")
    config = source_config(args, args.predictions, args.manifest)
    predictions = resolve_source(args.predictions, cache_dir=args.cache_dir, sha256=args.sha256,
                                 config=config)
    manifest = resolve_source(args.manifest, cache_dir=args.cache_dir,
                              sha256=args.manifest_sha256, sha256_from="--manifest-sha256",
                              config=config)
    input_file(predictions, "predictions", "predictions")
    input_file(manifest, "--manifest", "manifest CSV")
    result, scored = evaluate_files(
        predictions, manifest, args.protocol,
        bootstrap=METRIC_BOOTSTRAP if args.bootstrap is None else args.bootstrap, seed=args.seed, reparse=args.reparse,
        unit=unit, labelling=Labelling(args.labels, point_land, args.point_coast_km),
    )
    for w in result.pop("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    if args.by:
        spec = GroupSpec(args.by, args.min_support, BOOTSTRAP if args.bootstrap is None else args.bootstrap,
                         args.seed)
        result["groups"] = by_group(scored, spec, clusters=cluster_labels(scored, parse_unit(unit)))
    if args.scores_out:
        Path(args.scores_out).parent.mkdir(parents=True, exist_ok=True)
        # whole or not at all: a full disk
        replace_atomically(args.scores_out, scored.to_csv(index=False).encode("utf-8"))
    if args.json:
        print(dumps(result, indent=2))
    else:
        print(metrics_table(result, title=f"{args.predictions} ({args.protocol} protocol)"))
        if args.by:
            print("\n".join(groups_lines(result["groups"])))
    return 0
