"""Stage report: the last stage; one self-contained HTML report over every evaluated run.

usage: python stages/report.py OUT_DIR LEADERBOARD_CSV MANIFEST RUN_DIR [RUN_DIR ...]
Reads params `report` (and `mlflow.experiment`); writes OUT_DIR/report.html, plots/, tables/,
cdf/<run>.csv (for `dvc plots`) and summary.json, and logs them to MLflow.
"""

import sys
from pathlib import Path

import _params


def main() -> int:
    out_dir, board, manifest, *run_dirs = sys.argv[1:]
    p = _params.load("report", "data", "mlflow")
    cfg = dict(p["report"])
    track = bool(cfg.pop("track", True))
    from agl.report import make_report

    summary = make_report(run_dirs=[Path(d) for d in run_dirs], out_dir=Path(out_dir), cfg=cfg,
                          leaderboard_csv=Path(board), manifest=Path(manifest),
                          extra_provenance={"params data.dataset": p["data"]["dataset"]}, track=track,
                          experiment=p["mlflow"].get("experiment"))
    sweep = Path("metrics/sensitivity.csv")  # scripts/sensitivity-sweep; tracked in git
    if sweep.exists():
        from agl.sensitivity import add_to_report

        add_to_report(Path(summary["html"]), sweep, Path(out_dir) / "plots")
    print(f"wrote {summary['html']} ({len(summary['runs'])} runs)")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
