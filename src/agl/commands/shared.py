"""`agl shared [--out ../shared]`: build the test and reference data from public pinned sources."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "shared",
        help="build ../shared (the test data) from public pinned sources, SHA-256 checked",
        description=(
            "Download the files the tests and benchmarks read from ../shared: the AGL1K "
            "manifest and two published result files (the authors' repository at the pinned "
            "commit), two Aporee clips (Internet Archive), the AudioSet ontology; and write "
            "the paper's leaderboard. Every file is checked against its pinned SHA-256; a "
            "file already present and correct is not requested again."
        ),
    )
    p.add_argument(
        "--out", type=Path, default=Path("../shared"), help="folder to fill (default: ../shared, where the tests look)"
    )
    p.add_argument("--agl1k-base-url", help="mirror of the authors' repository at the commit")
    p.add_argument("--archive-base-url", help="mirror of https://archive.org/download")
    p.add_argument("--ontology-url", help="mirror of the pinned AudioSet ontology.json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.dataset.shared_data import build_shared

    urls = {k: v for k, v in (("agl1k_base", args.agl1k_base_url),
                              ("archive_base", args.archive_base_url),
                              ("ontology_url", args.ontology_url)) if v}  # fmt: skip
    status = build_shared(args.out, **urls)
    n_new = sum(v == "downloaded" for v in status.values())
    print(f"{args.out}: {len(status)} files ready ({n_new} downloaded, "
          f"{len(status) - n_new} already present)")  # fmt: skip
    return 0
