"""DVC stage `infer@<name>`: run one model of params.yaml `models:` over the dataset.

Reads params `infer` (how to run), `models.<name>` (which model) and `paper.published` (the
pinned file a `prompt_source: paper:<name>` reads; `paper.base_url`, where it is fetched from,
is read undeclared: agl.inference.runspec.stage_sources); `executor` (local or a Ray
cluster: transport, read undeclared, see `agl.executor.config.read_transport`). A rerun
after a crash resumes (predictions.jsonl is a persistent output); unchanged calls come from
the response cache, so they cost nothing. Exits 75 while batch clips are out and 1 when no clip succeeded,
so DVC locks no unfinished run and evaluate never scores a run of failures.
"""

from __future__ import annotations

import argparse
import sys

import _params

from agl.executor.config import read_transport
from agl.inference.entry import batch_control, finish_run
from agl.inference.params_run import RunTarget, run_spec, summary_line
from agl.inference.runspec import SOURCE_PARAMS, model_entry, parse_infer, stage_sources


def _parser() -> argparse.ArgumentParser:
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
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    key, source = f"models.{args.name}", args.params or "params.yaml"
    p = _params.load("infer", key, *SOURCE_PARAMS, path=args.params, required=False)
    spec = model_entry(args.name, p[key], source, args.params or _params.ROOT / "params.yaml")
    infer = parse_infer(p["infer"], source)
    if args.batch_status or args.batch_cancel:
        return batch_control(spec, infer, args.out, cancel=args.batch_cancel)
    target = RunTarget(args.manifest, args.audio_root, args.out,
                       telemetry=args.telemetry or f"build/telemetry/{args.name}.json")
    summary = run_spec(spec, infer, target, progress=sys.stderr.isatty(), sources=stage_sources(p, spec, infer, source),
                       transport=read_transport(args.params or _params.ROOT / "params.yaml"))
    # A stage that exits 0 is locked by DVC: only `dvc repro -f` runs it again.
    print(summary_line(summary, retry=f"`dvc repro -f infer@{args.name}` retries the failures"),
          file=sys.stderr)
    return finish_run(summary, who=f"infer@{args.name}", out_dir=args.out,
                      rerun=f"`dvc repro infer@{args.name}`")


if __name__ == "__main__":
    _params.run_main(main)
