"""Stage perturb@<name>: one intervention of params.yaml `perturb:` applied to the dataset.

Reads params `perturb.<name>` and `counterfactual.subset` / `counterfactual.format` /
`counterfactual.jobs` (processes here), and `executor:` undeclared (transport: where the clips
are perturbed never changes a byte; agl.executor). Writes
OUT_DIR/<level>/ (manifest.csv, audio/, lock.json, perturb.csv) for every level of the
intervention (one unless graded), on `counterfactual.subset` clips of PARENT_DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _params

from agl.core import canonical
from agl.counterfactual.effects import Subset, derive_dataset
from agl.counterfactual.perturb import parse_perturb
from agl.executor.config import read_transport


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("name", help="an intervention's name under params.yaml perturb:")
    ap.add_argument("parent", type=Path, help="the dataset folder to perturb (data)")
    ap.add_argument("out", type=Path, help="build/perturb/<name>")
    ap.add_argument("summary", type=Path, help="the stage's summary (JSON)")
    args = ap.parse_args(argv)
    key = f"perturb.{args.name}"
    p = _params.load(key, "counterfactual.subset", "counterfactual.format", "counterfactual.jobs",
                     required=False)
    levels = parse_perturb({args.name: p[key]} if p[key] is not None else {})
    if args.name not in levels:
        _params.load(key)  # exits: no intervention of that name
    summary = derive_dataset(
        args.parent,
        args.out,
        levels[args.name],
        subset=Subset.from_params(p["counterfactual.subset"]),
        fmt=str(p["counterfactual.format"] or "mp3"),
        progress=sys.stderr.isatty(),
        jobs=p["counterfactual.jobs"] or 1,
        transport=read_transport(_params.ROOT / "params.yaml"),
    )
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_json(args.summary, summary)
    print(f"perturb@{args.name}: {summary['clips']} clips x {len(summary['levels'])} level(s) -> {args.out}",
          file=sys.stderr)
    failed = summary.get("failed") or {}
    if failed:  # counted and named; the reasons are in the summary
        key, why = next(iter(failed.items()))
        print(f"perturb@{args.name}: warning: {len(failed)} of {summary['clips']} clip(s) cannot be "
              f"decoded and are left out of every level (first: {key}: {why}); reasons in {args.summary}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    _params.run_main(main)
