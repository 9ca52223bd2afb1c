"""DVC stage `birds`: BirdNET on every clip that passed the filter (see agl.birds.birdnet).

Reads params.yaml `birds:` (`jobs`: processes here), and `executor:` undeclared (transport:
where the clips are heard never changes a byte; agl.executor). Writes one row per clip
(birds.csv: `birds_heard`, the species and non-bird classes, BirdNET's evidence per AGL1K
category), every detection with its scientific and common name, max confidence and seconds (birds_detections.jsonl), a
summary, and its headline (clips listened to, clips with a bird heard) for `dvc exp show`.
With `birds.enabled: false` every row has status `off` and nothing is loaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _params import ROOT, load, run_main

from agl.birds.birdnet import BirdConfig, detections_jsonl, frame, run_birds
from agl.core import canonical, diskwrite
from agl.dataset.manifest import load_manifest
from agl.dataset.passed import clips_to_listen
from agl.executor.config import read_transport


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--audio-root", required=True, type=Path)
    ap.add_argument("--filter", required=True, type=Path, help="the filter stage's table")
    ap.add_argument("--out", required=True, type=Path, help="birds.csv")
    ap.add_argument("--detections", required=True, type=Path, help="birds_detections.jsonl")
    ap.add_argument("--summary", required=True, type=Path)
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    ap.add_argument("--params", type=Path, default=None, help="default: the repo's params.yaml")
    args = ap.parse_args(argv)
    section = load("birds", **({"path": args.params} if args.params else {}))["birds"]
    cfg = BirdConfig.from_params(section)
    items, skipped = clips_to_listen(load_manifest(args.manifest), args.audio_root, args.filter, cfg.only_passed)
    facts: dict = {}
    results, info, wall = run_birds(items, cfg, read_transport(args.params or ROOT / "params.yaml"), facts)
    info = {**info, "skipped_by_filter": skipped}
    for path in (args.out, args.detections, args.summary):
        path.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(frame(results), args.out)
    diskwrite.write_text(args.detections, detections_jsonl(results))
    canonical.write_json(args.summary, info)
    canonical.write_timings(args.summary, {"wall_s": wall, **facts})  # machine-dependent: never hashed
    if args.headline:
        from agl.core.headline import birds_headline, write_headline

        write_headline(args.headline, birds_headline(info))
    print(
        f"birds: {info['listened']} clip(s) listened to, birds heard in {info['birds_heard']}; "
        f"{skipped} skipped (failed the filter); {info['audio_seconds'] / max(wall, 1e-9):.0f}x "
        "real time",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    run_main(main)
