"""`agl verify`: a fresh run against the committed dvc.lock, on a tiny real DVC repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run, subprocess_env

from agl.verify.compare import compare_locks

ENV = subprocess_env()


def lock(code_md5: str, out_md5: str, scale: float = 2.0) -> dict:
    return {
        "schema": "2.0",
        "stages": {
            "double": {
                "cmd": "python double.py",
                "deps": [
                    {"path": "double.py", "hash": "md5", "md5": code_md5, "size": 10},
                    {"path": "data", "hash": "md5", "md5": "d.dir", "size": 5, "nfiles": 1},
                ],
                "params": {"params.yaml": {"double": {"scale": scale}}},
                "outs": [{"path": "out.txt", "hash": "md5", "md5": out_md5, "size": 4}],
            }
        },
    }


def test_compare_locks_tells_a_stale_lock_from_machine_dependent_bytes():
    committed = lock("c0de", "0a")
    assert compare_locks(committed, lock("c0de", "0a")) == []
    (stale,) = compare_locks(committed, lock("c0de2", "0b"))
    assert [c.path for c in stale.outs] == ["out.txt"] and [c.path for c in stale.deps] == ["double.py"]
    assert "stale" in stale.verdict
    (noisy,) = compare_locks(committed, lock("c0de", "0b"))
    assert not noisy.deps and "not reproducible" in noisy.verdict
    (param,) = compare_locks(committed, lock("c0de", "0b", scale=3.0))
    assert [(c.path, c.committed, c.now) for c in param.params] == [("double.scale", "2.0", "3.0")]


@pytest.fixture
def repo(tmp_path) -> Path:
    """git + DVC, one stage (code, data and a param in, one output), run and committed."""
    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    (root / "data" / "x.txt").write_text("21\n")
    (root / "double.py").write_text(
        "import yaml\nscale = yaml.safe_load(open('params.yaml'))['double']['scale']\n"
        "open('out.txt', 'w').write(str(int(open('data/x.txt').read()) * scale) + '\\n')\n"
    )
    (root / "params.yaml").write_text("double:\n  scale: 2\n")
    (root / "dvc.yaml").write_text(
        "stages:\n  double:\n    cmd: python double.py\n    deps: [double.py, data]\n"
        "    params: [double]\n    outs: [out.txt]\n"
    )
    run("git init -q && dvc init -q && dvc repro -q && git add -A && git commit -qm run", root, ENV)
    return root


def test_verify_passes_then_names_a_tampered_output_and_a_commit_without_a_rerun(repo):
    ok = run("agl verify", repo, ENV)
    assert ok.stdout.startswith("agl verify: OK")

    (repo / "out.txt").write_text("43\n")  # tampered after the run
    bad = run("agl verify", repo, ENV, ok=None)
    assert bad.returncode == 1 and "stage double" in bad.stdout and "out.txt (modified)" in bad.stdout
    run("dvc checkout -q -f", repo, ENV)

    # A code change committed without re-running: the reviewer's run disagrees with the lock.
    (repo / "double.py").write_text((repo / "double.py").read_text().replace("* scale", "* scale + 1"))
    run("git commit -qam 'change the code, forget dvc repro'", repo, ENV)
    run("dvc repro -q", repo, ENV)
    stale = run("agl verify", repo, ENV, ok=None)
    assert stale.returncode == 1
    assert "stage double: code changed without a re-run" in stale.stdout
    assert "output out.txt" in stale.stdout and "dep    double.py" in stale.stdout


def test_a_changed_folder_dep_names_the_files_that_changed_in_it(repo):
    """DVC names only the folder (a code package: `src/agl/core`, every stage "changed");
    agl verify adds which files in it differ from the commit."""
    (repo / "data" / "x.txt").write_text("22\n")
    (repo / "data" / "new.txt").write_text("a new file\n")
    before = run("agl verify", repo, ENV, ok=None)
    assert before.returncode == 1 and "deps data (modified)" in before.stdout
    assert "(changed in it: data/new.txt, data/x.txt)" in before.stdout, before.stdout
    run("dvc repro -q", repo, ENV)
    after = run("agl verify", repo, ENV, ok=None)
    assert "dep    data:" in after.stdout and "changed in it: data/new.txt, data/x.txt" in after.stdout, after.stdout
