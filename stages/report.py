"""Stage report: the last stage; one self-contained HTML report over every evaluated run.

usage: python stages/report.py [--birds BIRDS_CSV] OUT_DIR LEADERBOARD_CSV MANIFEST RUN_DIR [RUN_DIR ...]
                               [--counterfactual DIR]
Reads params `report` (and `mlflow.experiment`); writes OUT_DIR/report.html, plots/, tables/,
cdf/<run>.csv (for `dvc plots`) and summary.json, and logs them to MLflow.
"""

import sys
from pathlib import Path

import _params


def main() -> int:
    args = sys.argv[1:]
    birds = None
    if args[:1] == ["--birds"]:  # the birds stage's table (agl.report.birds)
        birds, args = Path(args[1]), args[2:]
    sections = ()
    if "--counterfactual" in args:  # the section "What the models listen to"
        i = args.index("--counterfactual")
        effects = Path(args[i + 1]) / "effects.csv"
        del args[i : i + 2]
        from agl.counterfactual.report_section import section

        sections = (lambda figs, tables, img: section(effects, figs, img, tables),)
    sweep = Path("metrics/sensitivity.csv")  # scripts/sensitivity-sweep; tracked in git
    if sweep.exists():  # the section "Localizability: sensitivity to γ and θ"
        from agl.curation.sensitivity import report_section

        sections += (lambda figs, tables, img: report_section(sweep, figs),)
    out_dir, board, manifest, *run_dirs = args
    p = _params.load("report", "data", "mlflow")
    cfg = dict(p["report"])
    track = bool(cfg.pop("track", True))
    from agl.report.build import make_report

    summary = make_report(run_dirs=[Path(d) for d in run_dirs], out_dir=Path(out_dir), cfg=cfg,
                          leaderboard_csv=Path(board), manifest=Path(manifest),
                          extra_provenance={"params data.dataset": p["data"]["dataset"]}, track=track,
                          experiment=p["mlflow"].get("experiment"), birds_csv=birds,
                          sections=sections)
    print(f"wrote {summary['html']} ({len(summary['runs'])} runs)")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
