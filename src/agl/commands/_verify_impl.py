"""The work of `agl verify` (agl.commands.verify registers the command and imports this
module when it runs): the lock's verdict, and for each differing run whether its records
still match their cached replies."""

from __future__ import annotations

import argparse
from pathlib import Path

from agl.inference.audit import audit_line, audit_run
from agl.inference.runspec import load_params, parse_infer
from agl.verify.compare import render, verify


def run(args: argparse.Namespace) -> int:
    verdict = verify(args.repo, args.rev)
    print(render(verdict))
    for line in _edited(args.repo, verdict):
        print(line)
    return 0 if verdict.ok else 1


def _edited(repo: Path, verdict) -> list[str]:
    """For each run's predictions that differ (on disk, or in the lock with the same
    inputs), whether records no longer match their cached replies: an edit, told apart from
    a machine difference where the reply cache can tell (agl.inference.audit)."""
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
