"""DVC stage `tag`: AudioSet categories and speech for every clip that passed the filter.

Reads params.yaml `tag:` (`jobs`: processes here), and `executor:` undeclared (transport:
where the clips are heard never changes a byte; agl.executor). Writes the AGL1K category
columns + speech per clip (tags.csv), the full class scores (tags_classes.csv; no class
columns for the `precomputed` tagger), and a summary.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _params import ROOT, load, run_main

from agl.core import canonical
from agl.curation.tagging import TagConfig, tag_clips
from agl.dataset.manifest import load_manifest
from agl.dataset.passed import clips_to_listen
from agl.executor.config import read_transport


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--audio-root", required=True, type=Path)
    ap.add_argument("--filter", required=True, type=Path, help="the filter stage's table")
    ap.add_argument("--out", required=True, type=Path, help="tags.csv")
    ap.add_argument("--classes", required=True, type=Path, help="tags_classes.csv")
    ap.add_argument("--summary", required=True, type=Path)
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    ap.add_argument("--params", type=Path, default=None, help="default: the repo's params.yaml")
    args = ap.parse_args(argv)
    section = load("tag", **({"path": args.params} if args.params else {}))["tag"]
    cfg = TagConfig.from_params(section)
    manifest = load_manifest(args.manifest)
    items, skipped = clips_to_listen(manifest, args.audio_root, args.filter, cfg.only_passed)
    facts: dict = {}
    run = tag_clips(items, cfg, manifest, read_transport(args.params or ROOT / "params.yaml"), facts)
    for path in (args.out, args.classes, args.summary):
        path.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(run.frame(), args.out)
    canonical.write_csv(run.class_frame(), args.classes, default="share")  # class probabilities
    summary, timings = canonical.split({**run.summary(), "skipped_by_filter": skipped}, ("wall_s",))
    canonical.write_json(args.summary, summary)
    canonical.write_timings(args.summary, {**timings, **facts})  # machine-dependent: kept out of DVC
    if args.headline:
        from agl.core.headline import tag_headline, write_headline

        write_headline(args.headline, tag_headline(summary))
    print(f"tag: {summary['tagged']} clip(s) tagged with {cfg.tagger}; {skipped} skipped "
          "(failed the filter)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
