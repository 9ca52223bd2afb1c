"""DVC stage `filter`: measure every clip (RMS, flatness, clipping, ACI) and keep or drop it.

Reads params.yaml `filter:` (thresholds and `jobs`), and `executor:` undeclared (transport:
where the clips are measured never changes a byte; agl.executor). Writes the per-clip table (every measure,
pass/fail, the reason) and a summary (counts per reason, audio seconds, x real time).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _params import ROOT, load, run_main

from agl.core import canonical
from agl.curation.filtering import FilterConfig, filter_manifest
from agl.executor.config import read_transport


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--audio-root", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path, help="per-clip table (CSV)")
    ap.add_argument("--summary", required=True, type=Path, help="summary (JSON)")
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    ap.add_argument("--params", type=Path, default=None, help="default: the repo's params.yaml")
    args = ap.parse_args(argv)
    section = load("filter", **({"path": args.params} if args.params else {}))["filter"]
    cfg = FilterConfig.from_params(section)
    run = filter_manifest(args.manifest, args.audio_root, cfg,
                          transport=read_transport(args.params or ROOT / "params.yaml"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(run.frame(), args.out)
    summary, timings = canonical.split(run.summary(cfg), ("wall_s", "x_real_time", "jobs"))
    canonical.write_json(args.summary, summary)
    canonical.write_timings(args.summary, {**timings, **run.where})  # machine-dependent: kept out of DVC
    if args.headline:
        from agl.core.headline import filter_headline, write_headline

        write_headline(args.headline, filter_headline(summary))
    reasons = ", ".join(f"{k} {v}" for k, v in summary["failed_by_reason"].items()) or "none"
    print(f"filter: {summary['passed']} of {summary['clips']} clip(s) pass; failed: {reasons}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
