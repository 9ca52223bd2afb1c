"""`agl verify`: after `dvc repro`, does every output match the committed dvc.lock?"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="check that every pipeline output matches the committed dvc.lock (after dvc repro)",
        description=(
            "Compare dvc.lock (and data.dvc) as `dvc repro` left them with the versions "
            "committed at REV, and the files on disk with dvc.lock (DVC's status). For each "
            "output that differs: the stage that wrote it and the deps, params or command "
            "that differ. Exit 0 when everything matches, 1 otherwise."
        ),
    )
    p.add_argument("--rev", default="HEAD", help="the commit to compare with (default HEAD)")
    p.add_argument("--repo", type=Path, default=Path("."), help="repository root (default .)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agl.verify.compare import render, verify  # lazy: `agl --help` imports every command module

    verdict = verify(args.repo, args.rev)
    print(render(verdict))
    for line in _edited(args.repo, verdict):
        print(line)
    return 0 if verdict.ok else 1


def _edited(repo: Path, verdict) -> list[str]:
    """For each run's predictions that differ (on disk, or in the lock with the same
    inputs), whether records no longer match their cached replies: an edit, told apart from
    a machine difference where the reply cache can tell (agl.inference.audit)."""
    from agl.inference.audit import audit_line, audit_run  # lazy: only for a differing run
    from agl.inference.runspec import load_params, parse_infer  # (lazy, as above)

    paths: dict[str, str] = {}
    for stage, found in verdict.workspace.items():
        for path in found.get("outs", {}):
            paths[path] = stage
    for d in verdict.lock:
        for c in d.outs if d.same_inputs else []:
            paths[c.path] = d.stage
    runs = {p: s for p, s in paths.items() if p.endswith("predictions.jsonl") and (repo / p).is_file()}
    if not runs or not (repo / "params.yaml").is_file():
        return []
    cache = parse_infer(load_params(repo / "params.yaml").get("infer")).cache_dir
    lines = []
    for path, stage in sorted(runs.items()):
        found = audit_run(repo / path, repo / cache) if cache else None
        line = audit_line(path, found, stage) if found else None
        if line:
            lines.append(line)
    return lines
