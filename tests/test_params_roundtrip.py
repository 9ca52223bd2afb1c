"""`dvc exp run -S key=value`, which docs/experiments.md recommends, writes params.yaml back
through DVC's YAML dumper. The file is kept in the form that dumper writes (block style where
a flow mapping would pass its width, long scalars on their own line, nulls as DVC dumps
them), so one value set is one line changed. It once rewrote 39 lines for one value."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import run, subprocess_env

ROOT = Path(__file__).resolve().parents[1]


def test_dvc_exp_run_set_changes_one_line_of_params_yaml(tmp_path):
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copy(ROOT / "params.yaml", work / "params.yaml")
    (work / "dvc.yaml").write_text(
        "stages:\n  seed:\n    cmd: python -c \"import yaml; print(yaml.safe_load(open('params.yaml'))"
        "['evaluate']['seed'])\" > seed.txt\n    params: [evaluate.seed]\n    outs: [seed.txt]\n")
    env = subprocess_env(work, keys=False)
    run("git init -q && dvc init -q && dvc repro -q && git add -A && git commit -qm base", work, env)
    run("dvc exp run -q -S evaluate.seed=1", work, env)
    # The experiment is applied to the workspace: params.yaml as DVC wrote it.
    numstat = run("git diff --numstat -- params.yaml", work, env).stdout.split()
    diff = run("git diff -U0 -- params.yaml", work, env).stdout
    assert numstat[:2] == ["1", "1"], diff
    assert "-  seed: 0" in diff and "+  seed: 1" in diff, diff
    assert (work / "seed.txt").read_text().strip() == "1"
