"""`agl evaluate PREDICTIONS --manifest MANIFEST [--protocol paper|strict] [--json]`."""

from __future__ import annotations

import argparse

from agl.core.checks import arg_type, sha256_arg


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
    p.add_argument("--bootstrap", type=arg_type("count0"), default=None,
                   help="bootstrap resamples per 95%% CI (0: no intervals; default: "
                   "agl.scoring.config.METRIC_BOOTSTRAP, 10000; at most params.yaml's "
                   "evaluate.max_resamples, 100000)")
    p.add_argument("--seed", type=arg_type("seed"), default=0, help="bootstrap seed (0 or more)")
    p.add_argument("--unit", default=None,
                   help="unit of resampling of the intervals: clip, cell:<degrees>, city or "
                   "site:<km> (default: agl.scoring.clusters.DEFAULT_UNIT, site:25, as params.yaml's); "
                   "the clip interval is shown beside a cluster unit's")
    p.add_argument("--labels", choices=["manifest", "point"], default="manifest",
                   help="the true country: the manifest's, normalised as the paper does (default), "
                   "or the recording place's by its coordinates, answers matched by ISO 3166 code "
                   "(Taiwan and Hong Kong are not China); the result gives both accuracies")
    p.add_argument("--point-land", default="i", metavar="RES",
                   help="GSHHS land a predicted point must lie on to be in a country: c, l or i "
                   "(~1 km; default), or none (OSV-5M's nearest place, even at sea)")
    p.add_argument("--point-coast-km", type=arg_type("nonnegative"), default=5.0,
                   help="... or lie this close to its nearest town of 1,000 people (default 5)")
    p.add_argument("--by", choices=["income", "region", "subregion", "country", "language", "speech"],
                   help="also the headline metrics by group of recording places, intervals "
                   "resampling countries, small groups pooled, and the disparity (worst, best, "
                   "gap, ratio); covariates from the recording place, offline")
    p.add_argument("--min-support", type=arg_type("count"), default=10,
                   help="groups under this many clips are pooled (default 10, as params.yaml's "
                   "report.min_support)")
    p.add_argument("--reparse", action="store_true",
                   help="for published files: reparse the raw replies with this project's parser")
    p.add_argument("--scores-out", help="write the per-clip score table (CSV) here")
    add_source_options(p)
    p.set_defaults(func=run)


def add_source_options(p: argparse.ArgumentParser, *, manifest: bool = True) -> None:
    """Checksums and cache for inputs given as URLs or paper:<name> (see agl.dataset.sources)."""
    p.add_argument("--sha256", type=sha256_arg, help="expected SHA-256 of the predictions file "
                   "(refused if it differs); pinned files are checked without it")
    if manifest:
        p.add_argument("--manifest-sha256", type=sha256_arg, help="expected SHA-256 of the manifest")
    p.add_argument("--cache-dir", default="cache/sources",
                   help="where downloaded inputs are kept (default: cache/sources)")
    p.add_argument("--deadline-s", type=float, help="longest a download may take, seconds "
                   "(default: params.yaml paper.deadline_s, else 300)")
    p.add_argument("--max-bytes", type=int, help="largest file downloaded (default: "
                   "params.yaml paper.max_bytes, else 100 MB)")


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _evaluate_impl

    return _evaluate_impl.run(args)
