"""`data/` and its pin (issue 23): after `agl download`, `dvc repro` finds an unchanged
`data.dvc` unchanged (no "git add data.dvc" for a file that did not move), a changed folder is
still re-pinned, and the pin itself says what fills the folder (DVC's own error for a missing
pinned folder cannot carry a hint: it stops before any stage runs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from helpers import sh, subprocess_env

from agl.dataset.pin import cache_if_pinned

ROOT = Path(__file__).resolve().parents[1]


def test_the_pin_names_what_fills_the_folder():
    text = (ROOT / "data.dvc").read_text(encoding="utf-8")
    head = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    assert "agl download" in head and "missing data 'source': data" in head and "dvc pull" in head
    assert yaml.safe_load(text)["outs"][0]["path"] == "data"


@pytest.mark.slow
def test_a_download_matching_the_pin_leaves_nothing_to_re_pin(tmp_path):
    env = subprocess_env()
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "manifest.csv").write_text("key\nk1\n")
    (repo / "dvc.yaml").write_text("stages:\n  count:\n    cmd: ls data > n.txt\n    deps: [data]\n"
                                   "    outs: [n.txt]\n")
    sh("git init -q && dvc init -q && dvc add -q data && dvc repro -q && git add -A && "
        "git commit -qm pinned", repo, env)
    clone = tmp_path / "clone"
    sh(f"git clone -q {repo} {clone}", tmp_path, env)
    # What `agl download` does on a fresh clone: the same bytes again, outside DVC.
    (clone / "data").mkdir()
    (clone / "data" / "manifest.csv").write_text("key\nk1\n")
    assert cache_if_pinned("data", clone) is None  # not this folder's pin: nothing done
    assert cache_if_pinned(clone / "data", clone) == (
        "data/ matches data.dvc; stored in DVC's cache (`dvc push` can send it)")
    out = sh("dvc repro", clone, env)
    assert "'data.dvc' didn't change" in out and "git add" not in out, out
    # Other bytes: left alone, and `dvc repro` re-pins them (data.dvc really changes).
    (clone / "data" / "manifest.csv").write_text("key\nk2\n")
    line = cache_if_pinned(clone / "data", clone)
    assert line is not None and line.startswith("data/ differs from data.dvc")
    out = sh("dvc repro", clone, env)
    assert "git add" in out and "data.dvc" in out, out


@pytest.mark.slow
def test_a_restored_clip_puts_the_committed_pin_back(tmp_path):
    """Issue 50: a clip deleted by hand, `dvc repro` (it re-pins data.dvc to the smaller folder
    before the filter stage refuses it), then `agl download` restoring the clip: the folder is
    the committed data again, but agl blamed "another dataset or generator" and DVC asked to
    `git add data.dvc` although it had not moved. Now the committed pin is put back and said so."""
    env = subprocess_env()
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "a.txt").write_text("a\n")
    (repo / "data" / "b.txt").write_text("b\n")
    (repo / "dvc.yaml").write_text("stages:\n  count:\n    cmd: ls data > n.txt\n    deps: [data]\n"
                                   "    outs: [n.txt]\n")
    sh("git init -q && dvc init -q && dvc add -q data && dvc repro -q && git add -A && "
        "git commit -qm pinned", repo, env)
    (repo / "data" / "b.txt").unlink()  # deleted by hand
    sh("dvc repro -q", repo, env)  # re-pins data.dvc to the folder without b.txt
    assert sh("git status --short data.dvc", repo, env).strip() == "M data.dvc"
    (repo / "data" / "b.txt").write_text("b\n")  # what `agl download` restores
    line = cache_if_pinned(repo / "data", repo)
    assert line is not None and line.startswith("data/ holds again what data.dvc pins as committed"), line
    assert "another dataset" not in line
    assert sh("git status --short data.dvc", repo, env).strip() == ""  # unchanged for git
    out = sh("dvc repro", repo, env)
    assert "'data.dvc' didn't change" in out and not re.search(r"git add[^\n]*data\.dvc", out), out
