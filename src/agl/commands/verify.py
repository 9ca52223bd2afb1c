"""`agl verify`: after `dvc repro`, does every output match the committed dvc.lock?"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="check that every pipeline output matches the committed dvc.lock (after dvc repro)",
        description=(
            "Compare dvc.lock (and data.dvc) as `dvc repro` left them with the versions "
            "committed at REV, and the files on disk with dvc.lock (DVC's status). For each "
            "output that differs: the stage that wrote it and the deps, params or command "
            "that differ. Exit 0 when everything matches, 1 otherwise."
        ),
    )
    p.add_argument("--rev", default="HEAD", help="the commit to compare with (default HEAD)")
    p.add_argument("--repo", type=Path, default=Path("."), help="repository root (default .)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _verify_impl

    return _verify_impl.run(args)
