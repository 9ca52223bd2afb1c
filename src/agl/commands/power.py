"""`agl power A B --manifest M [--km X | --points Y]`: how many clips (and clusters) a
comparison of two runs needs, from their paired differences resampled by cluster."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from agl.commands.evaluate import add_source_options
from agl.core.checks import arg_type, check_count_flag, check_value
from agl.errors import AglError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "power",
        help="sample size to detect a difference between two runs, and the smallest detectable one",
        description="From two runs' paired differences on their common clips, resampled by "
        "cluster (docs/metrics.md#power): the smallest difference this dataset detects at the "
        "given power, and with --km or --points the clips and clusters needed to detect that one.",
    )
    p.add_argument("a", help="run A's predictions (JSONL or an authors' published file): a path, "
                   "an http(s) URL, or paper:<name>")
    p.add_argument("b", help="run B's predictions (as A)")
    p.add_argument("--manifest", required=True,
                   help="manifest CSV (AGL1K layout): a path, an http(s) URL, or paper:manifest")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--km", type=float, help="a difference in mean distance error to detect (km)")
    target.add_argument("--points", type=float,
                        help="a difference in accuracy to detect, in percentage points (--level)")
    p.add_argument("--level", choices=["country", "continent", "city"], default=None,
                   help="the accuracy compared (default: distance, or country with --points)")
    p.add_argument("--protocol", choices=["paper", "strict"], default="paper")
    p.add_argument("--unit", default=None, help="unit of resampling: clip, cell:<degrees>, city, "
                   "site:<km> (default: agl.scoring.clusters.DEFAULT_UNIT, site:25)")
    p.add_argument("--power", type=float, default=0.8, help="the power wanted (default 0.8)")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided test level (default 0.05)")
    p.add_argument("--bootstrap", type=arg_type("count"), default=2000,
                   help="cluster resamples behind the standard error (default 2000; at most "
                   "params.yaml's evaluate.max_resamples, 100000)")
    p.add_argument("--seed", type=arg_type("seed"), default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_source_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands._sources import source_config  # the same bounds as `agl evaluate`
    from agl.core.jsonutil import dumps
    from agl.dataset.sources import resolve_source
    from agl.scoring.clusters import DEFAULT_UNIT, parse_unit
    from agl.scoring.power_runs import PowerConfig, power_files

    check_count_flag("--bootstrap", args.bootstrap, 1)  # before any download or resampling
    if args.km is not None:  # by rule, before any work: --km 1e-300 asked for 1e600 clips
        check_value("--km", args.km, "agl power", rule="km_difference")
    if args.points is not None:
        check_value("--points", args.points, "agl power", rule="points")
    level = args.level or ("country" if args.points is not None else None)
    metric = f"{level}_correct" if level else "distance_km"
    if args.km is not None and level:
        raise AglError("--km compares distances; leave out --level (or give --points)")
    target = args.km if args.km is not None else None if args.points is None else args.points / 100
    config = PowerConfig(metric=metric, protocol=args.protocol, target=target,
                         unit=parse_unit(args.unit or DEFAULT_UNIT, "--unit").name,
                         alpha=args.alpha, power=args.power, n_boot=args.bootstrap, seed=args.seed)
    if args.sha256:  # never ignored: which of the two files would it check?
        raise AglError("--sha256 checks one predictions file and agl power reads two; check them "
                       "with `agl evaluate --sha256`, or name pinned ones (paper:<name>)")
    sources = source_config(args, args.a, args.b, args.manifest)
    a, b = (resolve_source(x, cache_dir=args.cache_dir, config=sources) for x in (args.a, args.b))
    manifest = resolve_source(args.manifest, cache_dir=args.cache_dir, sha256=args.manifest_sha256,
                              sha256_from="--manifest-sha256", config=sources)
    result = power_files(str(a), str(b), str(manifest), config)
    if args.json:
        print(dumps({**asdict(result), "unit": config.unit, "protocol": config.protocol}, indent=2))
        return 0
    km = metric == "distance_km"

    def show(x: float) -> str:
        return f"{x:,.1f} km" if km else f"{100 * x:.2f} points"

    print(f"{metric} A - B on {result.n_clips} common clips in {result.n_clusters} clusters "
          f"({config.unit}, {config.protocol} protocol): {show(result.diff)}, cluster-bootstrap "
          f"standard error {show(result.se)}, design effect (Kish) {result.deff:.2f}")
    how = ("Connor's formula for McNemar's test, variance at each gap, A and B discordant on "
           f"{result.discordant:.1%} of clips" if result.method == "connor"
           else "normal approximation of the cluster-robust z test")
    print(f"smallest difference detectable with {result.power:.0%} power at alpha {result.alpha:g}: "
          f"{show(result.detectable)} ({how})")
    if result.target is not None:
        print(f"to detect {show(result.target)}:")
        print(f"  independent clips: {result.clips_needed_independent:,}")
        print(f"  new clusters like the pilot's ({result.n_clips / result.n_clusters:.1f} clips each, "
              f"design effect {result.deff:.2f}): {result.clusters_needed:,} clusters, about "
              f"{result.clips_needed:,} clips (power on these clips: {result.power_now:.0%})")
        if result.clips_needed_manifest is not None:
            print(f"  clusters of the manifest's sizes ({result.manifest_clusters:,} clusters, "
                  f"size-weighted mean {result.manifest_weighted_size:.1f} clips; intra-cluster "
                  f"correlation {result.icc:.3f} from the pilot, design effect "
                  f"{result.manifest_deff:.2f}): {result.clusters_needed_manifest:,} clusters, about "
                  f"{result.clips_needed_manifest:,} clips")
    return 0
