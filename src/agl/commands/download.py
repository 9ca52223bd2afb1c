"""`agl download`: fill the dataset folder for params.yaml's `data.dataset`, flags overriding."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from agl.core.checks import check_sections


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "download",
        help="fill data/ (demo: generate offline; agl1k or a manifest: fetch from the Archive)",
        description=(
            "Fill the dataset folder (manifest.csv, audio/<key>/<mp3name>, lock.json) for "
            "params.yaml's data.dataset: demo generates the SYNTHETIC set offline; agl1k fetches "
            "the pinned AGL1K manifest and every clip from the Internet Archive; a path uses "
            "that manifest. Resumable and verified; flags override params.yaml `download:`."
        ),
    )
    p.add_argument("--params", type=Path, default=Path("params.yaml"),
                   help="params file (default: ./params.yaml; absent: built-in defaults)")
    p.add_argument("--dataset", help="demo | agl1k | path or URL of a manifest CSV")
    p.add_argument("--manifest", dest="dataset", help="alias of --dataset PATH")
    p.add_argument("--out", help="dataset folder (default: data)")
    p.add_argument("--base-url", help="where clips live: <base-url>/<key>/<mp3name>")
    p.add_argument("--metadata-url", help="Archive metadata API (checksums per item)")
    p.add_argument("--no-archive-checksums", action="store_true",
                   help="do not fetch the Archive's per-item checksums (lock still verifies)")
    p.add_argument("--jobs", type=int, help="parallel downloads")
    p.add_argument("--retries", type=int, help="retries per request on 429/5xx/timeouts")
    p.add_argument("--timeout-s", type=float, help="per-read timeout (connect, each read), seconds")
    p.add_argument("--deadline-s", type=float,
                   help="longest one request may take, headers and body (default 900)")
    p.add_argument("--max-clip-bytes", type=int,
                   help="largest clip accepted where the Archive lists no size (default 500 MB)")
    p.add_argument("--failure-budget", type=int, help="failed clips tolerated before failing")
    p.add_argument("--summary", help="write the run summary (JSON) here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module
    # (agl.dataset.pin imports DVC inside, only after a download).
    from agl.core.workspace import refuse_inside_project
    from agl.core.yamlfile import load_yaml
    from agl.dataset.pin import cache_if_pinned
    from agl.dataset.prepare import from_params, prepare

    if args.out is None and not args.params.exists():
        refuse_inside_project("agl download", "data/")
    params: dict = {}
    if args.params.exists():
        params = load_yaml(args.params)  # the one reader of configuration YAML
        check_sections(params, args.params)  # `evalute:` is no section: its knobs would be ignored
    overrides = {
        "out": args.out,
        "base_url": args.base_url,
        "metadata_url": args.metadata_url,
        "jobs": args.jobs,
        "retries": args.retries,
        "timeout_s": args.timeout_s,
        "deadline_s": args.deadline_s,
        "max_clip_bytes": args.max_clip_bytes,
        "failure_budget": args.failure_budget,
        "summary": args.summary,
    }
    spec, policy, summary_path = from_params(
        params, source=str(args.params), dataset=args.dataset,
        progress=not args.no_progress, **overrides,
    )  # fmt: skip
    if args.no_archive_checksums:
        policy = replace(policy, metadata_url=None)
    prepare(spec, policy, summary_path=summary_path)
    line = cache_if_pinned(spec.out)  # so `dvc repro` finds data.dvc unchanged
    if line:
        print(f"agl download: {line}", file=sys.stderr)
    return 0
