"""Commands run from a subfolder of the project (issue 50: from docs/, `agl verify` said there
was no dvc.lock and `agl report` to run the evaluate stage first): the commands that read the
project's files from its root name the root in one line, and a non-zero exit."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_agl

from agl.cli import FROM_ROOT

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [("verify",), ("report", "--no-track"), ("explore", "--no-browser"),
                                  ("export", "eee", "--out", "x"), ("mlflow",)])
def test_a_project_command_from_a_subfolder_names_the_root(argv, monkeypatch):
    assert argv[0] in FROM_ROOT
    monkeypatch.chdir(REPO / "docs")
    rc, out, err = run_agl(*argv)
    assert rc == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert f"run `agl {argv[0]}` from the project's root: cd {REPO.resolve()}" in err, err
    assert not (REPO / "docs" / "x").exists()


def test_verify_with_its_repo_named_runs_from_anywhere(monkeypatch):
    """`--repo DIR` names the project: no refusal (it then answers on that repository)."""
    monkeypatch.chdir(REPO / "docs")
    rc, out, err = run_agl("verify", "--repo", str(REPO), "--rev", "no-such-revision-x")
    assert "from the project's root" not in err and rc != 0, err
