"""Stage leaderboard: every evaluated run (models and paper reproductions), one table per dataset.

Reads params `leaderboard` and `paper.base_url` / `paper.cache_dir` (where the paper's own
values come from) and the bounds on that fetch (`paper.timeout_s`, `deadline_s`, `max_bytes`,
`redirect_hosts`); reads <RUNS>/*/metrics.json and <PAPER>/*/metrics.json; writes OUT_DIR/leaderboard.{csv,md,html}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _params

from agl.dataset.paper import fetch, read_paper_leaderboard, resolve
from agl.dataset.sources import SourceConfig, paper_values
from agl.errors import AglError
from agl.scoring import leaderboard


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--runs", type=Path, required=True, help="the infer/evaluate runs (build/runs)")
    ap.add_argument("--paper", type=Path, required=True, help="the paper stage's runs (build/paper)")
    args = ap.parse_args(argv)
    p = _params.load("leaderboard", "paper.base_url")
    cache_dir = _params.load("paper.cache_dir", required=False)["paper.cache_dir"] or "cache/paper"
    bounds = _params.load("paper.timeout_s", "paper.deadline_s", "paper.max_bytes",
                          "paper.redirect_hosts", required=False)
    limits = SourceConfig.from_params(
        {"paper": {k.split(".", 1)[1]: v for k, v in bounds.items()}}).limits()
    cfg = p["leaderboard"]
    files = sorted(args.runs.glob("*/metrics.json")) + sorted(args.paper.glob("*/metrics.json"))
    board = leaderboard.collect(files, cfg["protocol"], full_coverage=float(cfg.get("full_coverage", 1.0)),
                                refusal_note=float(cfg.get("refusal_note", leaderboard.REFUSAL_NOTE_SHARE)))
    note = ""
    if not board.empty and (board["paper_name"] != "").any():
        try:
            url = resolve(p["paper.base_url"], cfg["paper_values"])
            src = fetch(url, cache_dir, limits=limits,
                        url_from="paper.base_url and leaderboard.paper_values in params.yaml")
            board = leaderboard.attach_paper(board, read_paper_leaderboard(src))
        except AglError as exc:
            # A mirror without the authors' README: the paper's numbers shipped with agl.
            note = (f"paper values from agl's shipped copy (src/agl/data/paper_values.csv), "
                    f"because {exc}")
            print(f"warning: {note}", file=sys.stderr)
            board = leaderboard.attach_paper(board, paper_values())
    else:
        board = leaderboard.attach_paper(board, None)
    # Each dataset gets its own table and header (the synthetic demo is labelled there).
    written = leaderboard.write(board, args.out_dir, protocol=cfg["protocol"], note=note)
    print((args.out_dir / "leaderboard.md").read_text())
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    _params.run_main(main)
