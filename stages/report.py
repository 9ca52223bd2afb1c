"""Stage report: the last stage; one self-contained HTML report over every evaluated run.

usage: python stages/report.py [--birds BIRDS_CSV] OUT_DIR LEADERBOARD_CSV MANIFEST RUN_DIR ...
Reads params `report` (and `mlflow.experiment`); writes OUT_DIR/report.html, plots/, tables/,
cdf/<run>.csv (for `dvc plots`) and summary.json, and logs them to MLflow.
"""

import sys
from pathlib import Path

import _params


def main() -> int:
    argv = sys.argv[1:]
    birds = None
    if argv[:1] == ["--birds"]:  # the birds stage's table (agl.report_birds)
        birds, argv = Path(argv[1]), argv[2:]
    out_dir, board, manifest, *run_dirs = argv
    p = _params.load("report", "data", "mlflow")
    cfg = dict(p["report"])
    track = bool(cfg.pop("track", True))
    from agl.report import make_report

    summary = make_report(run_dirs=[Path(d) for d in run_dirs], out_dir=Path(out_dir), cfg=cfg,
                          leaderboard_csv=Path(board), manifest=Path(manifest),
                          extra_provenance={"params data.dataset": p["data"]["dataset"]}, track=track,
                          experiment=p["mlflow"].get("experiment"), birds_csv=birds)
    print(f"wrote {summary['html']} ({len(summary['runs'])} runs)")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
