"""Stage listen@<model>-<intervention>: one model on every level of one derived dataset.

Reads params `models.<MODEL>` and `infer` (how to run, as infer@<model>), `counterfactual`
(protocol, level_bootstrap, seed, track), `mlflow`, and `paper.base_url` / `paper.published`
(where a `prompt_source: paper:<name>` points).
For each level under PERTURB_DIR: prints the dry-run estimate (requests, audio minutes,
cost), runs the model (resumable and cached like infer@<model>), scores it, and logs one
MLflow run tagged with its parent dataset, intervention and level, nested under the model's
run on the original clips where that exists. SUMMARY holds only what data, params and code
decide; the estimate and this session's requests, cache hits and spend (run history) go to
its `.timings.json`, which DVC ignores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _params

from agl.contracts.models import parse_models
from agl.core import canonical
from agl.counterfactual.effects import log_listen_run, score_level
from agl.errors import AglError
from agl.inference.estimate import estimate_run
from agl.inference.finalize import SUMMARY
from agl.inference.model_run import RunTarget, run_spec, summary_line
from agl.inference.runspec import SOURCE_PARAMS, parse_infer, source_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", help="a name under params.yaml models:")
    ap.add_argument("intervention", help="a name under params.yaml perturb:")
    ap.add_argument("perturb_dir", type=Path, help="build/perturb/<intervention>")
    ap.add_argument("out_dir", type=Path, help="build/listen/<model>/<intervention>")
    ap.add_argument("summary_path", type=Path, help="the stage's summary (JSON)")
    args = ap.parse_args(argv)
    model, intervention, perturb_dir = args.model, args.intervention, args.perturb_dir
    out_dir, summary_path = args.out_dir, args.summary_path
    cf_keys = ("protocol", "level_bootstrap", "seed", "track")
    p = _params.load(f"models.{model}", "infer", "mlflow", *SOURCE_PARAMS,
                     *(f"counterfactual.{k}" for k in cf_keys), required=False)
    if p[f"models.{model}"] is None or p["infer"] is None or p["counterfactual.level_bootstrap"] is None:
        _params.load(f"models.{model}", "infer", "counterfactual.level_bootstrap")  # exits naming what is missing
    cf = {k: p[f"counterfactual.{k}"] for k in cf_keys if p[f"counterfactual.{k}"] is not None}
    spec = parse_models({model: p[f"models.{model}"]})[0]
    infer = parse_infer(p["infer"])
    sources = source_config(p)
    protocol = str(cf.get("protocol", "paper"))
    levels = sorted(d.name for d in Path(perturb_dir).iterdir() if (d / "manifest.csv").exists())
    if not levels:
        raise AglError(f"{perturb_dir}: no derived dataset; run perturb@{intervention} first")
    summary = {"model": model, "intervention": intervention, "protocol": protocol, "levels": {}}
    # What this session was going to request (0 on a resumed run): run history, so it goes to
    # the timings file beside the summary, which DVC ignores, not into the summary.
    timings: dict = {"levels": {}}
    for level in levels:
        data = Path(perturb_dir) / level
        out = Path(out_dir) / level
        est = estimate_run(spec, infer, manifest=data / "manifest.csv", audio_root=data / "audio", out_dir=out,
                           sources=sources)
        print(f"listen {model} x {intervention}/{level}: before the run: {est.line()}", file=sys.stderr)
        run = run_spec(
            spec,
            infer,
            RunTarget(data / "manifest.csv", data / "audio", out),
            progress=sys.stderr.isatty(),
            sources=sources,
        )
        retry = f"`dvc repro -f listen@{model}-{intervention}` retries the failures"
        print(f"listen {model} x {intervention}/{level}: {summary_line(run, retry=retry)}",
              file=sys.stderr)
        if run["n_recorded"] and run["n_failed"] == run["n_recorded"]:  # no result to score
            raise AglError(f"listen {model} x {intervention}/{level}: no clip succeeded (all "
                           f"{run['n_failed']} failed; see {out}/predictions.jsonl); fix the "
                           f"cause, then `dvc repro listen@{model}-{intervention}`")
        (out / SUMMARY).unlink(missing_ok=True)  # timings: kept out of the DVC-cached folder
        result = score_level(
            data, out, protocol=protocol, bootstrap=int(cf["level_bootstrap"]), seed=int(cf.get("seed", 0))
        )
        timings["levels"][level] = {"estimate_before_run": est.as_dict(),
                                    "requests": run["session_requests"],
                                    "cache_hits": run["session_cache_hits"],
                                    "cost_usd": run.get("session_cost_usd", 0.0)}
        summary["levels"][level] = {
            "n": result["n"],
            "distance_error_km": round(result["distance_error_km"], 3),
            "country_acc": round(result["country_acc"], 6),
            "continent_acc": round(result["continent_acc"], 6),
            "cost_usd": round(run["cost_usd"], 6),
            "n_failed": run["n_failed"],
        }
        if cf.get("track", True):
            log_listen_run(
                spec,
                intervention,
                level,
                data,
                out,
                result,
                run,
                protocol=protocol,
                experiment=p["mlflow"].get("experiment"),
            )
    Path(summary_path).parent.mkdir(parents=True, exist_ok=True)
    canonical.write_json(summary_path, summary)
    canonical.write_timings(summary_path, timings)
    return 0


if __name__ == "__main__":
    _params.run_main(main)
