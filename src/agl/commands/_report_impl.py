"""The work of `agl report` (agl.commands.report registers the command and imports this
module when it runs): the error-mode judge first where asked, then the report."""

from __future__ import annotations

import argparse
from pathlib import Path

from agl.core.checks import check_count_flag, flag_bound
from agl.core.yamlfile import load_yaml
from agl.errors import AglError
from agl.judges.error_modes import ErrorModeJudgeConfig, judge_runs
from agl.report.build import make_report
from agl.report.inputs import ReportConfig, ReportInputs


def run(args: argparse.Namespace) -> int:
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
    if not params.exists():
        return {}
    section = load_yaml(params).get("report") or {}
    if not isinstance(section, dict):
        raise AglError(f"{params}: report: expected a mapping of settings")
    return dict(section)


def _judge(cfg: dict, roots: list[Path], judges: Path) -> Path:
    """Run the error-mode judge over every run first (what the stage `judge` does)."""
    config = ErrorModeJudgeConfig.from_params(cfg.get("protocol", "paper"), cfg.get("wrong_km", 750.0),
                                              cfg["judge"])
    judge_runs(roots, judges, config)
    return judges
