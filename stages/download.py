"""Dataset stage `download`: fill data/ for params.yaml `data.dataset` (demo | agl1k | a path).

Reads params.yaml `data:` and `download:`. Writes the dataset folder (manifest.csv, audio/,
lock.json; pinned by data.dvc) and a run summary (downloaded / present / failed / bytes).
It runs before `dvc repro` (docs/data.md): DVC cannot let one path be both a stage output and
pinned by a .dvc file, and the pin is what a run names as its data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _params import ROOT, load, run_main

from agl.dataset.prepare import from_params, prepare


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    args = ap.parse_args(argv)
    params = load("data", "download", path=args.params)
    spec, policy, summary_path = from_params(params, source=str(args.params))
    prepare(spec, policy, summary_path=summary_path)
    from agl.dataset.pin import cache_if_pinned

    line = cache_if_pinned(spec.out, ROOT)  # so `dvc repro` finds data.dvc unchanged
    if line:
        print(f"download: {line}", file=sys.stderr)
    return 0  # failures within download.failure_budget are listed in the summary


if __name__ == "__main__":
    run_main(main)
