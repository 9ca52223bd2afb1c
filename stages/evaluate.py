"""Stage evaluate@<run>: score one run's predictions (the track stage logs it to MLflow).

Reads params `evaluate` and this run's entry `models.<RUN>` (its model and paper_name go into
metrics.json); `--duplicates` (the duplicates stage's table) joins each pair of clips that are
one recording into one cluster of the intervals. HEADLINE (metrics/runs/<run>.json in
dvc.yaml) gets the run's headline metrics under its name (`knn.mean_km`, ...): a small file
tracked in git, so `dvc exp show` lists them for every experiment. `agl evaluate` scores and logs in one go.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, replace

import _params

from agl.contracts.models import parse_models
from agl.core.headline import run_headline, write_headline
from agl.dataset.fingerprints import read_pairs
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import evaluate_run
from agl.scoring.text import run_lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run", help="the run's name (a key of params.yaml models:)")
    ap.add_argument("predictions", help="the run's predictions.jsonl")
    ap.add_argument("manifest")
    ap.add_argument("out_dir", help="where scores_<protocol>.csv and metrics.json go")
    ap.add_argument("headline", nargs="?", default=None, help="headline metrics (JSON, tracked in git)")
    ap.add_argument("--duplicates", default=None,
                    help="the duplicates stage's table: each pair of clips is one cluster")
    args = ap.parse_args(argv)
    p = _params.load("evaluate")
    entry = _params.load(f"models.{args.run}", required=False)[f"models.{args.run}"]
    # A run outside `models:` (a human player's, say) is described by its run_summary.json.
    spec = asdict(parse_models({args.run: entry})[0]) if entry is not None else {}
    info = {k: v for k, v in spec.items() if isinstance(v, str | int | float) and k != "name"}

    doc = evaluate_run(args.run, args.predictions, args.manifest, args.out_dir,
                       replace(EvaluateConfig.from_params(p["evaluate"]), track=False), info=info,
                       retry=f"`dvc repro -f infer@{args.run}` retries them",
                       links=tuple(read_pairs(args.duplicates)) if args.duplicates else ())
    if args.headline:
        write_headline(args.headline, run_headline(doc, args.run))
    for line in run_lines(doc):  # each with its coverage: clips predicted / the dataset's
        print(line)
    return 0


if __name__ == "__main__":
    _params.run_main(main)
