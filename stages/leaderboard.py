"""Stage leaderboard: every evaluated run (models and paper reproductions), one table per dataset.

usage: python stages/leaderboard.py OUT_DIR   (reads build/runs/*/metrics.json, build/paper/*/metrics.json)
"""

import sys
from pathlib import Path

import _params


def main() -> int:
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "build")
    p = _params.load("leaderboard", "paper")
    cfg = p["leaderboard"]
    from agl.dataset.paper import fetch, read_paper_leaderboard, resolve
    from agl.errors import AglError
    from agl.scoring import leaderboard

    files = sorted(Path("build/runs").glob("*/metrics.json"))
    files += sorted(Path("build/paper").glob("*/metrics.json"))
    board = leaderboard.collect(files, cfg["protocol"], full_coverage=float(cfg.get("full_coverage", 1.0)))
    note = ""
    if not board.empty and (board["paper_name"] != "").any():
        try:
            url = resolve(p["paper"]["base_url"], cfg["paper_values"])
            src = fetch(url, p["paper"].get("cache_dir", "cache/paper"))
            board = leaderboard.attach_paper(board, read_paper_leaderboard(src))
        except AglError as exc:
            # A mirror without the authors' README: the paper's numbers shipped with agl.
            from agl.dataset.sources import paper_values

            note = (f"paper values from agl's shipped copy (src/agl/data/paper_values.csv), "
                    f"because {exc}")
            print(f"warning: {note}", file=sys.stderr)
            board = leaderboard.attach_paper(board, paper_values())
    else:
        board = leaderboard.attach_paper(board, None)
    # Each dataset gets its own table and header (the synthetic demo is labelled there).
    written = leaderboard.write(board, out_dir, protocol=cfg["protocol"], note=note)
    print((out_dir / "leaderboard.md").read_text())
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    _params.run_main(main)
