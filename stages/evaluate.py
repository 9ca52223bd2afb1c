"""Stage evaluate@<run>: score one run's predictions and log it as an MLflow run.

usage: python stages/evaluate.py RUN_NAME PREDICTIONS MANIFEST OUT_DIR [HEADLINE]

HEADLINE (metrics/runs/<run>.json in dvc.yaml) gets the run's headline metrics: a small file
tracked in git, so `dvc exp show` lists them for every experiment.
"""

import sys

import _params


def main() -> int:
    run, predictions, manifest, out_dir = sys.argv[1:5]
    p = _params.load("evaluate", "models", "mlflow")
    cfg = p["evaluate"]
    from dataclasses import asdict

    from agl.inference.runspec import parse_models
    from agl.scoring.evaluate import evaluate_run

    # A run outside `models:` (a human player's, say) is described by its run_summary.json.
    known = {m.name: m for m in parse_models(p["models"])}
    spec = asdict(known[run]) if run in known else {}
    info = {k: v for k, v in spec.items() if isinstance(v, str | int | float) and k != "name"}

    doc = evaluate_run(
        run=run, predictions_path=predictions, manifest_path=manifest, out_dir=out_dir,
        protocols=list(cfg["protocols"]), bootstrap=int(cfg["bootstrap"]), seed=int(cfg["seed"]),
        strict_refusal_km=float(cfg["strict_refusal_km"]), info=info,
        experiment=p["mlflow"].get("experiment"),
    )
    if len(sys.argv) > 5:
        from agl.core.headline import run_headline, write_headline

        write_headline(sys.argv[5], run_headline(doc))
    def share(x) -> str:  # a field the run never attempts is not applicable, not "nan"
        return "n/a" if x is None or x != x else f"{x:.3f}"

    for protocol, res in doc["protocols"].items():
        print(f"{run} [{protocol}]: n={res['n']} mean {res['distance_error_km']:.1f} km, "
              f"country {share(res['country_acc'])}, continent {share(res['continent_acc'])}")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
