"""A full disk, for real (a 1 MiB tmpfs in a private mount namespace): `agl infer`,
`agl evaluate --scores-out` and the listening game each say so in one line, leave no file
cut under its final name, and the run resumes once there is room (issue 35)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env
from test_inference_api import make_clips

HERE = Path(__file__).resolve().parent


def _mount_ns_works() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_a_full_disk_is_one_line_and_nothing_half_written(tmp_path):
    if not _mount_ns_works():
        pytest.skip("`unshare -m` with a tmpfs mount is not permitted here (needs root): the "
                    "test needs a real full disk")
    make_clips(tmp_path, 12)
    disk, readonly = tmp_path / "disk", tmp_path / "readonly"
    disk.mkdir()
    readonly.mkdir()
    inner = (f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(disk))} && "
             f"mount -t tmpfs -o ro,size=64k tmpfs {shlex.quote(str(readonly))} && exec "
             f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE / 'full_disk_script.py'))} "
             f"{shlex.quote(str(disk))} {shlex.quote(str(tmp_path))} {shlex.quote(str(readonly))}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", inner], env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])

    infer = out["infer"]
    lines = infer["err"].strip().splitlines()
    assert infer["rc"] != 0 and "Traceback" not in infer["err"], infer["err"]
    assert lines[-1].startswith("agl infer: error: ") and "the disk is full" in lines[-1], lines
    assert infer["whole_lines"] and infer["lines"] < 12, infer  # cut back to whole records
    assert out["infer_resumed"] == {"rc": 0, "lines": 12}

    ev = out["evaluate"]
    assert ev["rc"] == 2 and len(ev["err"].strip().splitlines()) >= 1, ev
    last = ev["err"].strip().splitlines()[-1]
    assert last.startswith("agl evaluate: error: ") and "scores.csv" in last and "disk is full" in last
    assert "scores.csv" not in ev["left"] and not [n for n in ev["left"] if n.endswith(".tmp")], ev

    game = out["game"]
    assert game["status"] == 507 and "not saved" in game["message"] and "disk is full" in game["message"]
    assert game["bytes"] == 0, game  # no torn line

    # issue 49: an export on a full disk left a samples file cut short under its final name
    export = out["export"]
    last = export["err"].strip().splitlines()[-1]
    assert export["rc"] == 2 and "disk is full" in last and "Traceback" not in export["err"], export
    assert not [n for n in export["left"] if n.startswith("eee/")], export  # nothing under a final name
    # ... and MLflow migrating its store on a full disk left a half-made store that failed every later run
    said, left = out["mlflow_full"]["said"], out["mlflow_full"]["left"]
    assert said.startswith("error ") and "disk is full" in said and "\n" not in said, said
    assert left == [], left
    assert out["mlflow_after"].startswith("ok "), out["mlflow_after"]
    ro = out["mlflow_readonly"]
    assert ro.startswith("error ") and "\n" not in ro and ("read-only" in ro or "cannot open" in ro), ro
