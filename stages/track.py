"""Stage track: every run the pipeline scored, logged to MLflow in one process.

Reads params `models` (each evaluated run's model, backend and paper name), `evaluate` (the
scoring settings each run logs), `counterfactual` (which model listened to which
intervention, and how its levels were scored), `localizability` and `mlflow`. Logs, from the
files the evaluate, listen and localize stages wrote (agl.tracking.pipeline): one MLflow run
per evaluated run, one per listen level (nested under its model's run), one for the
localizability selection; prints the runs table's URL. Writes nothing DVC tracks: MLflow is
the record, and re-logging the same inputs updates the same runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.contracts.models import parse_models
from agl.counterfactual.listen import KEYS, ListenConfig
from agl.curation.localize import LocalizeFiles
from agl.scoring.config import EvaluateConfig
from agl.tracking.pipeline import TrackConfig, TrackInputs, track_pipeline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--runs", required=True, type=Path, help="build/runs: <run>/metrics.json")
    ap.add_argument("--listen", type=Path, help="build/listen: <model>/<intervention>.json")
    ap.add_argument("--perturb", type=Path, help="build/perturb: the derived datasets")
    ap.add_argument("--tags", type=Path, help="the tag stage's tags.csv (localize's input)")
    ap.add_argument("--reference", type=Path, help="localize's reference run")
    ap.add_argument("--localize-dir", type=Path, help="localize's tables")
    ap.add_argument("--localize-summary", type=Path, help="localize's summary")
    args = ap.parse_args(argv)
    p = _params.load("models", "evaluate", "counterfactual", "localizability", "mlflow")
    cf = p["counterfactual"] or {}
    listen = ListenConfig.from_params({k: cf.get(k) for k in KEYS}, p["mlflow"])
    pairs = [(m, i) for m in cf.get("models") or [] for i in cf.get("interventions") or []]
    localize = (LocalizeFiles(args.manifest, args.tags, args.reference, args.localize_dir, args.localize_summary)
                if args.localize_summary else None)
    config = TrackConfig(EvaluateConfig.from_params(p["evaluate"], p["mlflow"]), listen, p["localizability"])
    inputs = TrackInputs(args.manifest, args.runs, args.listen, args.perturb, localize, tuple(pairs))
    logged = track_pipeline(inputs, parse_models(p["models"]), config)
    print(f"track: {len(logged['runs'])} run(s), {logged['levels']} listen level(s)"
          f"{', the localizability selection' if logged['localize'] else ''} logged to MLflow")
    print(f"MLflow: {logged['mlflow_url']}")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
