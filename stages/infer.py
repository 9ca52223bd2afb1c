"""DVC stage `infer@<name>`: run one model of params.yaml `models:` over the dataset.

Reads params `infer` (how to run), `models.<name>` (which model) and `paper.base_url` /
`paper.published` (where a `prompt_source: paper:<name>` points). A rerun after a crash
resumes (predictions.jsonl is a persistent output); unchanged calls come from the response
cache, so they cost nothing.
"""

from __future__ import annotations

import argparse
import sys

import _params

from agl.contracts.models import parse_models
from agl.errors import AglError
from agl.inference.model_run import run_spec, summary_line
from agl.inference.runspec import SOURCE_PARAMS, parse_infer, source_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--name", required=True, help="the model's name under params.yaml models:")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--audio-root", required=True)
    ap.add_argument("--out", required=True, help="run folder (build/runs/<name>)")
    ap.add_argument("--params", default=None, help="default: the repo's params.yaml")
    ap.add_argument("--telemetry", default=None,
                    help="per-endpoint requests/failures/latency of a replica pool (not a DVC "
                         "output: timings); default build/telemetry/<name>.json")
    ap.add_argument("--batch-status", action="store_true",
                    help="print the model's batch jobs (settings.mode: batch) and exit")
    ap.add_argument("--batch-cancel", action="store_true",
                    help="cancel the model's batch jobs; the next run collects and falls back")
    args = ap.parse_args(argv)
    key = f"models.{args.name}"
    p = _params.load("infer", key, *SOURCE_PARAMS, path=args.params, required=False)
    source = args.params or "params.yaml"
    if p[key] is None:  # an unknown name: the error lists the models there are
        from agl.inference.runspec import find_model, load_params

        find_model(parse_models(load_params(args.params or _params.ROOT / "params.yaml").get("models"),
                                source), args.name, source)
    spec = parse_models({args.name: p[key]}, source)[0]
    infer = parse_infer(p["infer"], source)
    if args.batch_status or args.batch_cancel:
        from agl.inference.batch.control import cancel_lines, status_lines

        act = cancel_lines if args.batch_cancel else status_lines
        for line in act(spec.backend, spec.model, spec.settings, args.out,
                        timeout_s=float(infer.timeout_s)):
            print(line)
        return 0
    summary = run_spec(spec, infer, manifest=args.manifest, audio_root=args.audio_root,
                       out_dir=args.out, progress=sys.stderr.isatty(),
                       telemetry=args.telemetry or f"build/telemetry/{args.name}.json",
                       sources=source_config(p))
    # A stage that exits 0 is locked by DVC: only `dvc repro -f` runs it again.
    print(summary_line(summary, retry=f"`dvc repro -f infer@{args.name}` retries the failures"),
          file=sys.stderr)
    from agl.inference.batch.hook import pending

    if pending(summary):
        # A non-zero exit keeps DVC from locking an unfinished run; `dvc repro` again later
        # polls the jobs and collects (75: EX_TEMPFAIL, come back later).
        print(f"stages/infer.py: {args.name}: {pending(summary)} clip(s) still with the batch "
              "API (jobs submitted); run `dvc repro` again later to collect them",
              file=sys.stderr)
        return 75
    if summary["n_recorded"] and summary["n_failed"] == summary["n_recorded"]:
        # A run of failures is no result: exit non-zero so DVC locks nothing and evaluate
        # never scores it (as `agl infer` does).
        raise AglError(f"{args.name}: no clip succeeded (all {summary['n_failed']} failed; the "
                       f"reasons are in the error field of {args.out}/predictions.jsonl); fix "
                       f"the cause, then `dvc repro infer@{args.name}`")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
