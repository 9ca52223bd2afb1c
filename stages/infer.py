"""DVC stage `infer@<name>`: run one model of params.yaml `models:` over the dataset.

Reads params.yaml sections `models` (which model) and `infer` (how to run). A rerun after a
crash resumes (predictions.jsonl is a persistent output); unchanged calls come from the
response cache, so they cost nothing.
"""

from __future__ import annotations

import argparse
import sys

from agl.errors import AglError
from agl.inference.runspec import find_model, load_params, parse_infer, parse_models, run_spec, summary_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--name", required=True, help="the model's name under params.yaml models:")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--audio-root", required=True)
    ap.add_argument("--out", required=True, help="run folder (build/runs/<name>)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--telemetry", default=None,
                    help="per-endpoint requests/failures/latency of a replica pool (not a DVC "
                         "output: timings); default build/telemetry/<name>.json")
    args = ap.parse_args(argv)
    try:
        params = load_params(args.params)
        spec = find_model(parse_models(params.get("models"), args.params), args.name, args.params)
        infer = parse_infer(params.get("infer"), args.params)
        summary = run_spec(spec, infer, manifest=args.manifest, audio_root=args.audio_root,
                           out_dir=args.out, progress=sys.stderr.isatty(),
                           telemetry=args.telemetry or f"build/telemetry/{args.name}.json")
    except AglError as exc:
        from agl.core.secrets import scrub_text

        print(scrub_text(f"stages/infer.py: error: {exc}"), file=sys.stderr)
        return 2
    print(summary_line(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
