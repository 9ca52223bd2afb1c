"""Stage track: every model run the pipeline scored, logged to MLflow in one process.

Reads params `models` (each evaluated run's model, backend and paper name), `evaluate` (the
scoring settings each run logs), `counterfactual` (which model listened to which
intervention, and how its levels were scored) and `mlflow`. Logs, from the files the
evaluate and listen stages wrote (agl.tracking.pipeline), one MLflow run per evaluated run
and one per listen level (nested under its model's run); prints the runs table's URL.
RECEIPT: what was logged, by run key (names and data versions, never MLflow's run ids).
Logging the same inputs again updates the same runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.contracts.models import parse_models
from agl.core import canonical
from agl.counterfactual.listen import KEYS, ListenConfig
from agl.scoring.config import EvaluateConfig
from agl.tracking.pipeline import TrackConfig, TrackInputs, track_pipeline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("receipt", type=Path, help="what was logged (JSON)")
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--runs", required=True, type=Path, help="build/runs: <run>/metrics.json")
    ap.add_argument("--listen", type=Path, help="build/listen: <model>/<intervention>.json")
    ap.add_argument("--perturb", type=Path, help="build/perturb: the derived datasets")
    ap.add_argument("--leaderboard", type=Path,
                    help="build/leaderboard.csv: each run's rank, logged so the runs table sorts as it")
    args = ap.parse_args(argv)
    p = _params.load("models", "evaluate", "counterfactual", "mlflow")
    cf = p["counterfactual"] or {}
    config = TrackConfig(EvaluateConfig.from_params(p["evaluate"], p["mlflow"]),
                         ListenConfig.from_params({k: cf.get(k) for k in KEYS}, p["mlflow"]))
    pairs = tuple((m, i) for m in cf.get("models") or [] for i in cf.get("interventions") or [])
    inputs = TrackInputs(args.manifest, args.runs, args.listen, args.perturb, pairs, args.leaderboard)
    receipt, url = track_pipeline(inputs,
                                  parse_models(p["models"]), config)
    canonical.write_json(args.receipt, receipt)
    levels = sum(map(len, receipt["listen"].values()))
    print(f"track: {len(receipt['runs'])} run(s) and {levels} listen level(s) logged to MLflow")
    print(f"MLflow: {url}")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
