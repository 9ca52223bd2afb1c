"""Ctrl-C in a stage: one line and exit 130, whether it lands while the stage is still
importing or inside its main (then whatever was written is whole; `dvc repro` resumes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

STAGES = Path(__file__).resolve().parents[1] / "stages"
START = f"import sys; sys.path.insert(0, {str(STAGES)!r}); import os, signal, _params\n"


@pytest.mark.parametrize("when, body", [
    ("while starting", "os.kill(os.getpid(), signal.SIGINT)\nimport time; time.sleep(30)\n"),
    ("inside main", "_params.run_main(lambda: os.kill(os.getpid(), signal.SIGINT) or __import__('time').sleep(30))\n"),
])
def test_ctrl_c_is_one_line_and_exit_130(when, body):
    done = subprocess.run([sys.executable, "-c", START + body], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, (when, done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "dvc repro" in lines[0], (when, done.stderr)
