"""Stage listen@<model>-<intervention>: one model on every level of one derived dataset.

Reads params `models.<MODEL>` and `infer` (how to run, as infer@<model>), `counterfactual`
(protocol, level_bootstrap, seed, resampling_unit), `evaluate.max_resamples` and
`paper.published` (the pinned file a `prompt_source: paper:<name>` reads; `paper.base_url`
read undeclared, as infer@<model>); `executor` as infer@<model> (transport, read undeclared:
`agl.executor.config.read_transport`).
A model that does not perceive the audio it is sent (the cascade reads the curation tables of
the original clips: agl.inference.runspec.check_listens) is refused in one line, before any
work. For each level under PERTURB_DIR: prints the dry-run estimate (requests, audio minutes,
cost), runs the model (resumable and cached like infer@<model>) and scores it; the track
stage logs one MLflow run per level, tagged with its parent dataset, intervention and level,
nested under the model's run on the original clips (agl.counterfactual.listen). SUMMARY holds
only
what data, params and code decide; the estimate and this session's requests, cache hits and
spend (run history) go to its `.timings.json`, which DVC ignores.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import _params

from agl.core import canonical
from agl.counterfactual.listen import KEYS, ListenConfig, listen_levels
from agl.executor.config import read_transport
from agl.inference.estimate import estimate_run
from agl.inference.params_run import RunTarget, run_spec, summary_line
from agl.inference.runspec import SOURCE_PARAMS, check_listens, model_entry, parse_infer, stage_sources


def model_runner(spec, infer, sources, intervention: str, transport=None):
    """(data, out) -> (run summary, estimate): the model on one level, with its lines printed."""
    def run_model(data: Path, out: Path):
        where = f"listen {spec.name} x {intervention}/{data.name}"
        target = RunTarget(data / "manifest.csv", data / "audio", out)
        est = estimate_run(spec, infer, manifest=target.manifest, audio_root=target.audio_root, out_dir=out,
                           sources=sources)
        print(f"{where}: before the run: {est.line()}", file=sys.stderr)
        run = run_spec(spec, infer, target, progress=sys.stderr.isatty(), sources=sources,
                       transport=transport)
        retry = f"`dvc repro -f listen@{spec.name}-{intervention}` retries the failures"
        print(f"{where}: {summary_line(run, retry=retry)}", file=sys.stderr)
        return run, est.as_dict()

    return run_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", help="a name under params.yaml models:")
    ap.add_argument("intervention", help="a name under params.yaml perturb:")
    ap.add_argument("perturb_dir", type=Path, help="build/perturb/<intervention>")
    ap.add_argument("out_dir", type=Path, help="build/listen/<model>/<intervention>")
    ap.add_argument("summary_path", type=Path, help="the stage's summary (JSON)")
    args = ap.parse_args(argv)
    p = _params.load(f"models.{args.model}", "infer", *SOURCE_PARAMS,
                     *(f"counterfactual.{k}" for k in KEYS if k != "track"), "evaluate.max_resamples",
                     required=False)
    if p[f"models.{args.model}"] is None or p["infer"] is None or p["counterfactual.level_bootstrap"] is None:
        _params.load(f"models.{args.model}", "infer", "counterfactual.level_bootstrap")  # exits naming it
    spec = model_entry(args.model, p[f"models.{args.model}"], "params.yaml", _params.ROOT / "params.yaml")
    check_listens(spec, args.intervention)  # a cascade would hear the original clip: one line, no work
    infer = parse_infer(p["infer"])
    run_model = model_runner(spec, infer, stage_sources(p, spec, infer, "params.yaml"), args.intervention,
                             read_transport(_params.ROOT / "params.yaml"))  # as infer@<model>
    config = ListenConfig.from_params({k: p[f"counterfactual.{k}"] for k in KEYS if k != "track"},
                                      max_resamples=p["evaluate.max_resamples"])
    config = replace(config, track=False)  # the track stage logs the levels
    summary, timings = listen_levels(spec, args.intervention, args.perturb_dir, args.out_dir, config, run_model)
    args.summary_path.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_json(args.summary_path, summary)
    canonical.write_timings(args.summary_path, timings)
    return 0


if __name__ == "__main__":
    _params.run_main(main)
