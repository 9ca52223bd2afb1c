"""`agl filter`: the acoustic filter over any manifest + audio folder (e.g. a crawled pool)."""

from __future__ import annotations

import argparse
from pathlib import Path

from agl.core import diskwrite
from agl.errors import AglError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "filter",
        help="measure clips (RMS, flatness, clipping, ACI) and keep or drop each with a reason",
        description=(
            "Decode every clip of a manifest once and measure RMS level, spectral flatness, "
            "clipping ratio and the Acoustic Complexity Index; write one row per clip (every "
            "measure, pass/fail, the reason). Thresholds come from params.yaml `filter:`; a "
            "corrupt or missing file is a row, not a crash."
        ),
    )
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--audio-root", type=Path, required=True, help="audio at <root>/<key>/<mp3name>")
    p.add_argument("--out", type=Path, required=True, help="per-clip table (CSV)")
    p.add_argument("--params", type=Path, default=Path("params.yaml"),
                   help="thresholds from its `filter:` section (absent: built-in defaults)")
    p.add_argument("--jobs", type=int, help="processes (default: params, else 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.core.jsonutil import dumps
    from agl.core.outpaths import input_file, output_file
    from agl.core.yamlfile import load_yaml
    from agl.curation.filtering import FilterConfig, filter_manifest

    input_file(args.manifest, "--manifest", "manifest CSV")
    output_file(args.out, "--out")

    section = {}
    if args.params.exists():
        section = load_yaml(args.params).get("filter") or {}
        if not isinstance(section, dict):
            raise AglError(f"{args.params}: filter: expected a mapping of settings")
    cfg = FilterConfig.from_params(section, source=f"{args.params} filter")
    result = filter_manifest(args.manifest, args.audio_root, cfg, jobs=args.jobs)
    diskwrite.write_text(args.out, result.frame().to_csv(index=False))
    print(dumps(result.summary(cfg), indent=1))
    return 0
