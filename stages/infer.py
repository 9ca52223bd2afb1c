"""DVC stage `infer@<name>`: run one model of params.yaml `models:` over the dataset.

Reads params `infer` (how to run) and `models.<name>` (which model). A rerun after a crash
resumes (predictions.jsonl is a persistent output); unchanged calls come from the response
cache, so they cost nothing.
"""

from __future__ import annotations

import argparse
import sys

import _params

from agl.inference.model_run import run_spec
from agl.inference.runspec import parse_infer, parse_models, summary_line


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
    args = ap.parse_args(argv)
    key = f"models.{args.name}"
    p = _params.load("infer", key, path=args.params, required=False)
    source = args.params or "params.yaml"
    if p[key] is None:  # an unknown name: the error lists the models there are
        from agl.inference.runspec import find_model, load_params

        find_model(parse_models(load_params(args.params or _params.ROOT / "params.yaml").get("models"),
                                source), args.name, source)
    spec = parse_models({args.name: p[key]}, source)[0]
    infer = parse_infer(p["infer"], source)
    summary = run_spec(spec, infer, manifest=args.manifest, audio_root=args.audio_root,
                       out_dir=args.out, progress=sys.stderr.isatty(),
                       telemetry=args.telemetry or f"build/telemetry/{args.name}.json")
    print(summary_line(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    _params.run_main(main)
