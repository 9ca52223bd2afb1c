"""DVC stage `localize`: Audio Localizability weights, per-clip l_k, and the selected clip list.

Reads params.yaml `localizability:` (γ, θ, judges, rating scale, target size, speech balance,
and `reference`: the predictions file of the reference run). Writes into --out-dir:
weights.csv (a_i, ā_i, P/N), clips.csv (l_k, split, error, x), ratings.csv (every judge's
ratings), selected.csv (the chosen keys); the summary is the stage's metrics file. Everything
is logged to MLflow as one run (agl.core.tracking), keyed by the inputs' content hashes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _params import load, run_main

from agl.curation.localize import LocalizeFiles, localize, summary_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--tags", required=True, type=Path, help="the tag stage's tags.csv")
    ap.add_argument("--reference", required=True, type=Path, help="reference run predictions")
    ap.add_argument("--out-dir", required=True, type=Path)
    ap.add_argument("--summary", required=True, type=Path)
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    ap.add_argument("--params", type=Path, default=None, help="default: the repo's params.yaml")
    args = ap.parse_args(argv)
    where = {"path": args.params} if args.params else {}
    section = load("localizability", **where)["localizability"]
    files = LocalizeFiles(args.manifest, args.tags, args.reference, args.out_dir, args.summary)
    summary = localize(files, section)
    if args.headline:
        from agl.core.headline import localizability_headline, write_headline

        write_headline(args.headline, localizability_headline(summary))
    print(summary_line(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
