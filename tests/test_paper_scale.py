"""benchmarks/paper_scale.py --quick: the paper-scale benchmark's tables keep their rows.

The quick mode runs the filter stage for real on two short SYNTHETIC clips and prints every
table with every row (the parts it skips say so), so a change that breaks the benchmark's
harness or drops a stage from its tables fails here; its figures are not asserted (a shared
machine's timings are noise at this size).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from helpers import REPO, SHARED, shared_path

CURATION_ROWS = ("filter", "tag", "birds", "speech", "perturb@mask_speech", "perturb@truncate",
                 "perturb@tags", "all curation stages")
SCORING_ROWS = ("evaluate (each run)", "judge (each run; report.judge null)", "paper (no published runs)",
                "leaderboard", "report", "explorer export")


def _rows(out: str, title: str) -> dict[str, list[str]]:
    """The rows of the table under `## <title>`: first cell -> the others."""
    block = out.split(f"## {title}", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    return {re.split(r"\s{2,}", line.strip())[0]: re.split(r"\s{2,}", line.strip())[1:] for line in block}


def test_quick_mode_prints_every_table_with_its_rows(tmp_path):
    shared_path("data/agl1k/geoLocalization_schema.csv")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "AGL_SHARED": str(SHARED), "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([sys.executable, "benchmarks/paper_scale.py", "--quick", "--keep", str(tmp_path / "w")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert re.search(r"^machine: \d+ CPU\(s\)", out, re.M) and "load average" in out
    curation = _rows(out, "curation: per stage, on this host")
    assert tuple(curation) == CURATION_ROWS
    # the filter ran: numbers in every column; the others say they did not
    assert all(re.fullmatch(r"[\d.]+x?|-", cell) for cell in curation["filter"]), curation["filter"]
    assert all(curation[s][0] == "not run" for s in CURATION_ROWS[1:-1])
    assert re.fullmatch(r"[\d.]+", curation["all curation stages"][-1])
    assert tuple(_rows(out, "curation on a local Ray cluster")) == ("speech", "perturb@mask_speech")
    projected = _rows(out, "AGL1K curation projected (hours)")
    assert tuple(projected) == ("this host, local", *(f"{n} Ray worker{'s' * (n > 1)} (1 CPU each)"
                                                                 for n in (1, 2, 4, 8, 16, 32)))
    assert projected["1 Ray worker (1 CPU each)"][-1] == "not measured"
    assert tuple(_rows(out, "dvc repro on the demo set: 1, 4 and 16 models")) == ("1", "4", "16")
    assert tuple(_rows(out, "experiments table at 16 models")) == (
        "dvc exp show", "dvc exp show --csv", "agl exp", "agl exp --wide")
    assert tuple(_rows(out, "scoring: 16 runs x 1444 clips")) == SCORING_ROWS
