"""Stage paper: fetch the authors' published predictions, import, evaluate under `paper`.

Reads params `paper` (base_url of the pinned authors' repository or a mirror, the manifest's
path in it, and the runs to reproduce) and `evaluate`. Writes build/paper/<run>/ for each run
and build/paper/summary.json. With no runs listed (the offline default) it writes an empty
summary that says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.core import canonical
from agl.core.checks import check_resamples
from agl.scoring.config import EvaluateConfig
from agl.scoring.paper_runs import reproduce_paper


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path, help="build/paper: one folder per run and summary.json")
    args = ap.parse_args(argv)
    p = _params.load("paper", "evaluate", "mlflow")
    ev = p["evaluate"]
    check_resamples({"evaluate.metric_bootstrap": (ev["metric_bootstrap"], 1)}, ev.get("max_resamples"))
    # The authors' runs are scored under their own protocol only.
    evaluation = EvaluateConfig(protocols=("paper",), metric_bootstrap=ev["metric_bootstrap"], seed=ev["seed"],
                                experiment=p["mlflow"].get("experiment"))
    summary = reproduce_paper(p["paper"], evaluation, args.out)
    canonical.write_json(args.out / "summary.json", summary)
    return 0


if __name__ == "__main__":
    _params.run_main(main)
