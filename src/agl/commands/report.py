"""`agl report`: one self-contained HTML report over every evaluated run."""

from __future__ import annotations

import argparse
from pathlib import Path

from agl.core.checks import arg_type, check_count_flag, flag_bound


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write build/report/report.html: leaderboard, plots, breakdowns, error modes",
        description="Breakdowns, plots and error modes of every evaluated run, in one "
                    "self-contained HTML file (images inlined; opens offline).",
    )
    p.add_argument("--runs", nargs="+", default=["build/runs", "build/paper"],
                   help="folders holding <run>/metrics.json + scores_<protocol>.csv")
    p.add_argument("--leaderboard", default="build/leaderboard.csv")
    p.add_argument("--manifest", default="data/manifest.csv", help="for the data version")
    p.add_argument("--out", default="build/report")
    p.add_argument("--birds", default="build/curation/birds.csv",
                   help="the birds stage's table (BirdNET); the Birds section if it exists")
    p.add_argument("--judges", default="build/judges",
                   help="the judge stage's tables (<run>/error_modes.csv); a run without one gets the "
                        "record's modes only")
    p.add_argument("--params", default="params.yaml",
                   help="read the `report:` section from here (if the file exists)")
    p.add_argument("--protocol", choices=["paper", "strict"])
    p.add_argument("--bootstrap", type=arg_type("count"), help="bootstrap resamples per CI")
    p.add_argument("--judge-backend", help="inference backend for the error-mode judge (judges every run "
                                            "first, into OUT/judges)")
    p.add_argument("--judge-model", help="the judge's model id")
    p.add_argument("--judge-base-url", help="base_url setting for the judge backend")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agl.report.build import make_report  # lazy: `agl --help` imports every command module
    from agl.report.inputs import ReportConfig, ReportInputs  # lazy: as above

    check_count_flag("--bootstrap", args.bootstrap, 1, args.params)  # before any work
    cfg = _report_params(Path(args.params))
    if args.protocol:
        cfg["protocol"] = args.protocol
    if args.bootstrap is not None:
        cfg["group_bootstrap"] = args.bootstrap
    judges = Path(args.judges)
    if args.judge_backend or args.judge_model:
        settings = {"temperature": 0}
        if args.judge_base_url:
            settings["base_url"] = args.judge_base_url
        cfg["judge"] = {"backend": args.judge_backend, "model": args.judge_model,
                        "settings": settings, "cache_dir": "cache/judges"}
        judges = _judge(cfg, [Path(d) for d in args.runs], Path(args.out) / "judges")
    if args.no_track:
        cfg["track"] = False
    config = ReportConfig.from_params(cfg, max_resamples=flag_bound(args.params), source=args.params)
    inputs = ReportInputs(run_dirs=tuple(Path(d) for d in args.runs), leaderboard_csv=Path(args.leaderboard),
                          manifest=Path(args.manifest), judges_dir=judges,
                          birds_csv=Path(args.birds) if Path(args.birds).exists() else None)
    summary = make_report(inputs, Path(args.out), config)
    print(f"wrote {summary['html']} ({len(summary['runs'])} runs: {', '.join(summary['runs'])})")
    return 0


def _report_params(params: Path) -> dict:
    """params.yaml `report:` (empty when the file does not exist)."""

    from agl.errors import AglError  # lazy: as above

    if not params.exists():
        return {}
    from agl.core.yamlfile import load_yaml  # (lazy, as above)

    section = load_yaml(params).get("report") or {}
    if not isinstance(section, dict):
        raise AglError(f"{params}: report: expected a mapping of settings")
    return dict(section)


def _judge(cfg: dict, roots: list[Path], judges: Path) -> Path:
    """Run the error-mode judge over every run first (what the stage `judge` does)."""
    from agl.judges.error_modes import ErrorModeJudgeConfig, judge_runs  # lazy: as above

    config = ErrorModeJudgeConfig.from_params(cfg.get("protocol", "paper"), cfg.get("wrong_km", 750.0),
                                              cfg["judge"])
    judge_runs(roots, judges, config)
    return judges
