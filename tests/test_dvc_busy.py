"""`agl verify` while `dvc repro` holds DVC's lock: one line naming the holder, not DVC's
`LockError` traceback (issue 35). The lock is taken with DVC's own API (`make_lock`, as
`dvc.repo.Repo` does for `.dvc/tmp/lock`), by a child process standing in for `dvc repro`."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from helpers import run, subprocess_env

from agl.cli import main
from agl.core.dvc_busy import busy_line

HOLD = ("import sys; from dvc.lock import make_lock; "
        "lock = make_lock(sys.argv[1], tmp_dir=sys.argv[2]); lock.lock(); "
        "print('held', flush=True); sys.stdin.read(); lock.unlock()")


@pytest.fixture
def repo(tmp_path):
    """git + DVC with a committed dvc.lock whose output is on disk (no `dvc repro` needed)."""
    from dvc.repo import Repo

    root = tmp_path / "repo"
    root.mkdir()
    run("git init -q", root, subprocess_env())
    Repo.init(str(root)).close()
    (root / "out.txt").write_text("42\n")
    (root / "dvc.yaml").write_text("stages:\n  make:\n    cmd: echo 42 > out.txt\n    outs: [out.txt]\n")
    (root / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"make": {
        "cmd": "echo 42 > out.txt",
        "outs": [{"path": "out.txt", "hash": "md5", "md5": "50a2fabfdd276f573ff97ace8b11c5f4", "size": 3}]}}}))
    run("git add -A && git commit -qm run", root, subprocess_env())
    return root


def test_verify_while_dvc_holds_its_lock_is_one_line_naming_the_pid(repo, capfd):
    tmp = repo / ".dvc" / "tmp"
    tmp.mkdir(exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp / "lock"), str(tmp)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=subprocess_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        rc = main(["verify", "--repo", str(repo)])
    finally:
        holder.communicate("", timeout=60)
    err = capfd.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "LockError" not in err, err
    assert f"is running (pid {holder.pid}) and holds DVC's lock ({tmp / 'lock'})" in lines[0]
    assert "wait for it to finish and run `agl verify` again" in lines[0]
    # released: the same command gets through to DVC's status (the output was never cached)
    assert main(["verify", "--repo", str(repo)]) == 1
    assert "out.txt (not in cache)" in capfd.readouterr().out


def test_a_lock_naming_a_dead_process_is_called_stale(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    tmp = tmp_path / ".dvc" / "tmp"
    tmp.mkdir(parents=True)
    (tmp / "lock").write_text(f"{tmp / 'lock'}|host|{dead.stdout.strip()}|123\n")  # hardlink_lock's form
    line = busy_line(tmp_path, "agl verify")
    assert f"names pid {dead.stdout.strip()}, which is no longer running: a stale lock; remove {tmp / 'lock'}" in line


@pytest.mark.parametrize("plant", ["victim", "/dev/null", "garbage"])
def test_a_link_or_garbage_at_dvcs_rwlock_is_one_line_and_nothing_written_through_it(repo, capfd, tmp_path,
                                                                                     plant):
    """DVC opens `.dvc/tmp/rwlock` following links: a link there had DVC write its JSON into the
    link's target, and a link to /dev/null ended `agl verify` in a RWLockFileCorruptedError
    traceback (issue 49)."""
    tmp = repo / ".dvc" / "tmp"
    tmp.mkdir(exist_ok=True)
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    rwlock = tmp / "rwlock"
    rwlock.unlink(missing_ok=True)
    if plant == "garbage":
        rwlock.write_text("not json\n")
    else:
        rwlock.symlink_to(victim if plant == "victim" else plant)
    rc = main(["verify", "--repo", str(repo)])
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert str(rwlock) in lines[0] and "remove it" in lines[0]
    assert ("symbolic link" in lines[0]) is (plant != "garbage")
    assert victim.read_text() == "mine\n"
