"""Stage leaderboard: every evaluated run (models and paper reproductions), one table per dataset.

Reads params `leaderboard` and `paper.base_url` / `paper.cache_dir` (where the paper's own
values come from) and the bounds on that fetch (`paper.timeout_s`, `deadline_s`, `max_bytes`,
`redirect_hosts`); reads <RUNS>/*/metrics.json, <PAPER>/*/metrics.json and <IMPORTED>/*/metrics.json
(other evaluators' runs, `agl import` of Every Eval Ever records; docs/interchange.md); writes
OUT_DIR/leaderboard.{csv,md,html}.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.dataset.sources import SourceConfig
from agl.scoring import leaderboard


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--runs", type=Path, required=True, help="the infer/evaluate runs (build/runs)")
    ap.add_argument("--paper", type=Path, required=True, help="the paper stage's runs (build/paper)")
    ap.add_argument("--imported", type=Path, default=None,
                    help="runs imported from EEE records (imported/); absent: none")
    args = ap.parse_args(argv)
    p = _params.load("leaderboard", "paper.base_url")
    cache_dir = _params.load("paper.cache_dir", required=False)["paper.cache_dir"] or "cache/paper"
    bounds = _params.load("paper.timeout_s", "paper.deadline_s", "paper.max_bytes",
                          "paper.redirect_hosts", required=False)
    limits = SourceConfig.from_params(
        {"paper": {k.split(".", 1)[1]: v for k, v in bounds.items()}}).limits()
    cfg = p["leaderboard"]
    files = sorted(args.runs.glob("*/metrics.json")) + sorted(args.paper.glob("*/metrics.json"))
    if args.imported is not None:
        files += sorted(args.imported.glob("*/metrics.json"))
    board, note = leaderboard.build(files, cfg, base_url=p["paper.base_url"], cache_dir=cache_dir, limits=limits)
    # Each dataset gets its own table and header (the synthetic demo is labelled there).
    written = leaderboard.write(board, args.out_dir, protocol=cfg["protocol"], note=note)
    print((args.out_dir / "leaderboard.md").read_text())
    # Runs served by another model than asked (marked in the tables): said where one looks.
    for run, flags in leaderboard.served_lines(files).items():
        print(f"WARNING served model: {run}: " + "; ".join(flags))
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    _params.run_main(main)
