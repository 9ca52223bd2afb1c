"""Where the demo pipeline's time goes: wall and CPU seconds of every stage of `dvc repro`.

    python benchmarks/demo_stage_cpu.py [--keep DIR]

Copies the working tree's tracked files to a temporary folder (the checkout's own build/ and
caches are left alone), runs `agl download` there, then runs each stage's command in DVC's
order, one process at a time, and measures it with `os.wait4` (user and system CPU of the
stage process and its children). DVC's own bookkeeping (hashing, the lock) is measured once at
the end by `dvc commit`, so the per-stage figures are the stages' own.

Prints one row per stage, sorted by user CPU, then the totals. The acceptance figure of the
newcomer's path (issue 36) is the total user CPU: under 150 s on the 2-core machine.

    python benchmarks/demo_stage_cpu.py --repro

runs the README's own `agl download && dvc repro` instead (DVC in this process's child, which
reports its own CPU apart from its children's), and splits the user CPU three ways: the
download, DVC's own work (the lock, params, hashing, the run cache) and the stage commands
(the wall column gives the whole `dvc repro` once, on DVC's row).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _copy_tree(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)


def _timed(cmd: str, cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """Wall, user and system seconds of one shell command (its whole process tree)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, shell=True, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        err = proc.stderr.read().decode(errors="replace").strip().splitlines()
        sys.exit(f"stage command failed ({proc.returncode}): {cmd}\n  "
                 + (err[-1] if err else ""))
    proc.stderr.close()
    return wall, ru.ru_utime, ru.ru_stime


def _stages_in_order(work: Path) -> list[tuple[str, str]]:
    # DVC's own graph, so the order is the one `dvc repro` would take.
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(work)) as repo:
        order = reversed(list(nx.topological_sort(repo.index.graph)))
        # addressing is "<path to dvc.yaml>:<stage>" from outside the repository: the stage
        return [(s.addressing.rsplit(":", 1)[-1], s.cmd) for s in order if getattr(s, "cmd", None)]


# `dvc repro` in a child that reports the CPU of DVC's own process apart from its stages'.
_SPLIT = """
import json, resource, sys
from dvc.cli import main
rc = main(["repro", "-q"])
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"dvc": [me.ru_utime, me.ru_stime], "stages": [kids.ru_utime, kids.ru_stime]},
          open(sys.argv[1], "w"))
sys.exit(rc)
"""


def _repro_split(work: Path, env: dict[str, str]) -> list[tuple[str, float, float, float]]:
    """The README's command as it runs: the download, then DVC's own CPU and the stages'."""
    rows = [("agl download", *_timed("agl download", work, env))]
    report = work / ".split.json"
    wall, _, _ = _timed(f"{shlex.quote(sys.executable)} -c {shlex.quote(_SPLIT)} {report}", work, env)
    split = json.loads(report.read_text())
    # The wall clock is the whole repro's (its row: DVC's), not divided between the two.
    rows.append(("dvc repro: DVC itself", wall, *split["dvc"]))
    rows.append(("dvc repro: stage commands", 0.0, *split["stages"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="work here and keep the folder")
    ap.add_argument("--repro", action="store_true",
                    help="run `agl download && dvc repro` itself; split DVC's CPU from the stages'")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="agl-demo-cpu-"))
    work.mkdir(parents=True, exist_ok=True)
    _copy_tree(work)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONPATH": str(ROOT / "src")}
    if args.repro:
        rows = _repro_split(work, env)
    else:
        rows = [("agl download", *_timed("agl download", work, env))]
        for name, cmd in _stages_in_order(work):
            cmd = " ".join(cmd) if isinstance(cmd, list) else cmd
            rows.append((name, *_timed(cmd, work, env)))
        rows.append(("(dvc commit)", *_timed("dvc commit -f -q", work, env)))
    width = max(len(r[0]) for r in rows)
    print(f"{'stage':<{width}}  {'wall s':>7}  {'user s':>7}  {'sys s':>6}")
    for name, wall, user, sys_s in sorted(rows, key=lambda r: -r[2]):
        print(f"{name:<{width}}  {wall:7.1f}  {user:7.1f}  {sys_s:6.1f}")
    tot = [sum(r[i] for r in rows) for i in (1, 2, 3)]
    print(f"{'total':<{width}}  {tot[0]:7.1f}  {tot[1]:7.1f}  {tot[2]:6.1f}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept: {shlex.quote(str(work))}")


if __name__ == "__main__":
    main()
