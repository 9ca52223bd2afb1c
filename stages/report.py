"""Stage report: the last stage; one self-contained HTML report over every evaluated run.

Reads params `report`, `data` (which dataset, for the provenance block) and `mlflow`; writes
OUT_DIR/report.html, plots/, tables/, cdf/<run>.csv (for `dvc plots`) and summary.json, and
logs them to MLflow.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _params

from agl.report.build import make_report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("leaderboard", type=Path, help="the leaderboard stage's CSV")
    ap.add_argument("manifest", type=Path)
    ap.add_argument("run_dirs", type=Path, nargs="+", help="folders holding <run>/metrics.json")
    ap.add_argument("--birds", type=Path, default=None, help="the birds stage's table (birds.csv)")
    ap.add_argument("--counterfactual", type=Path, default=None,
                    help="the counterfactual stage's folder: the section 'What the models listen to'")
    ap.add_argument("--sensitivity", type=Path, default=None,
                    help="scripts/sensitivity-sweep's table: the section 'Localizability: "
                         "sensitivity to γ and θ' (skipped while the file does not exist)")
    ap.add_argument("--speech", type=Path, default=None,
                    help="the speech stage's table (speech.csv): the section 'What language alone tells'")
    args = ap.parse_args(argv)
    sections = ()
    if args.counterfactual:
        from agl.counterfactual.report_section import section

        effects = args.counterfactual / "effects.csv"
        sections = (lambda figs, tables, img: section(effects, figs, img, tables),)
    if args.sensitivity and args.sensitivity.exists():
        from agl.curation.sensitivity import report_section

        sweep = args.sensitivity
        sections += (lambda figs, tables, img: report_section(sweep, figs),)
    p = _params.load("report", "data", "mlflow")
    cfg = dict(p["report"])
    track = bool(cfg.pop("track", True))
    if args.speech:
        from agl.speech.report_section import speech_section

        sections += (lambda figs, tables, img: speech_section(args.speech, args.run_dirs, cfg, figs, tables, img,
                                                              manifest=args.manifest),)
    summary = make_report(run_dirs=args.run_dirs, out_dir=args.out_dir, cfg=cfg,
                          leaderboard_csv=args.leaderboard, manifest=args.manifest,
                          extra_provenance={"params data.dataset": p["data"]["dataset"]}, track=track,
                          experiment=p["mlflow"].get("experiment"), birds_csv=args.birds,
                          sections=sections)
    print(f"wrote {summary['html']} ({len(summary['runs'])} runs)")
    return 0


if __name__ == "__main__":
    _params.run_main(main)
