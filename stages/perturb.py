"""Stage perturb@<name>: one intervention of params.yaml `perturb:` applied to the dataset.

usage: python stages/perturb.py NAME PARENT_DIR OUT_DIR SUMMARY_JSON
Writes OUT_DIR/<level>/ (manifest.csv, audio/, lock.json, perturb.csv) for every level of the
intervention (one unless graded), on `counterfactual.subset` clips of PARENT_DIR.
"""

import sys
from pathlib import Path

import _params


def main() -> int:
    name, parent, out, summary_path = sys.argv[1:5]
    p = _params.load("perturb", "counterfactual")
    from agl.core import canonical
    from agl.counterfactual.effects import Subset, derive_dataset
    from agl.counterfactual.perturb import parse_perturb
    from agl.errors import AglError

    levels = parse_perturb(p["perturb"])
    if name not in levels:
        raise AglError(f"params.yaml: no intervention named '{name}' under perturb:")
    sub = p["counterfactual"].get("subset") or {}
    summary = derive_dataset(
        Path(parent),
        Path(out),
        levels[name],
        subset=Subset(size=sub.get("size"), seed=int(sub.get("seed", 0))),
        fmt=str(p["counterfactual"].get("format", "mp3")),
        progress=sys.stderr.isatty(),
    )
    Path(summary_path).parent.mkdir(parents=True, exist_ok=True)
    canonical.write_json(summary_path, summary)
    print(f"perturb@{name}: {summary['clips']} clips x {len(summary['levels'])} level(s) -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    _params.run_main(main)
