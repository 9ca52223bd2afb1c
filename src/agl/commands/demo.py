"""`agl demo`: write the SYNTHETIC demo set (offline, seconds) into a folder."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="generate the synthetic demo dataset (offline, no keys)",
        description=(
            "Write the SYNTHETIC demo set: manifest.csv (AGL1K layout), audio/<key>/<mp3name>, "
            "lock.json and demo_truth.json. Same seed, same bytes."
        ),
    )
    p.add_argument("--out", default="data", help="dataset folder to write (default: data)")
    p.add_argument("--seed", type=int, default=None, help="generator seed (default: 1444)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.core.workspace import refuse_inside_project
    from agl.dataset.demo import DEFAULT_SEED, write_demo

    if args.out == "data":  # the default, relative to here
        refuse_inside_project("agl demo", "data/")
    seed = DEFAULT_SEED if args.seed is None else args.seed
    clips = write_demo(args.out, seed=seed)
    seconds = sum(float(c.row["mp3seconds"]) for c in clips)
    print(
        f"agl demo: wrote {len(clips)} SYNTHETIC clips ({seconds / 60:.1f} min of audio, "
        f"seed {seed}) to {args.out}",
        file=sys.stderr,
    )
    return 0
