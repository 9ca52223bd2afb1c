"""`agl verify` tells an output that records run history from one the machine made other
bytes of, and on a fresh clone says what to run instead of a mismatch per stage (issue 23).

A real git + DVC repository with two tiny stages: `hist` writes how many requests "this
session" made (a value an ordinary `dvc repro -f` changes: the bug class), `mach` a number
whose last digits follow an environment variable (the machine-noise class)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run, subprocess_env

STAGE = """\
import json, os, pathlib, sys
state = pathlib.Path("state.txt")  # git-ignored state that outlives a run, like a reply cache
n = int(state.read_text()) if state.exists() else 0
state.write_text(str(n + 1))
pathlib.Path("out").mkdir(exist_ok=True)
if sys.argv[1] == "hist":
    doc = {"answer": 42, "levels": {"a": {"n": 3, "estimate": {"requests": 0 if n else 3}}}}
else:
    doc = {"answer": 42.0 + float(os.environ.get("NOISE", "0"))}
pathlib.Path(f"out/{sys.argv[1]}.json").write_text(json.dumps(doc, sort_keys=True))
"""

DVC_YAML = """\
stages:
  hist:
    cmd: python stage.py hist
    deps: [stage.py]
    outs: [out/hist.json]
  mach:
    cmd: python stage.py mach
    deps: [stage.py]
    outs: [out/mach.json]
"""


@pytest.fixture()
def env():
    return subprocess_env()


@pytest.mark.slow
def test_verify_names_run_history_apart_from_the_machine(tmp_path, env):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "stage.py").write_text(STAGE)
    (repo / "dvc.yaml").write_text(DVC_YAML)
    (repo / ".gitignore").write_text("state.txt\n")
    run("git init -q && dvc init -q && dvc repro -q && git add -A && git commit -qm run", repo, env)
    ok = run("agl verify", repo, env)
    assert "agl verify: OK" in ok.stdout

    # An ordinary rerun: the history stage rewrites its output, the other one, on a
    # "different machine", gets other last digits.
    run("dvc repro -f -q", repo, {**env, "NOISE": "1e-9"})
    r = run("agl verify", repo, env, ok=None)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    hist = next(line for line in lines if line.startswith("stage hist:"))
    mach = next(line for line in lines if line.startswith("stage mach:"))
    assert "depends on run history" in hist and "not reproducible on this machine" not in hist
    assert "not reproducible on this machine" in mach and "run history" not in mach
    assert "run history: levels.a.estimate.requests differ" in r.stdout
    assert "machine: answer differ" in r.stdout

    # A fresh clone: one line saying what to run, exit 2, not a mismatch per stage.
    run(f"git clone -q {repo} {tmp_path / 'clone'}", tmp_path, env)
    fresh = run("agl verify", tmp_path / "clone", env, ok=None)
    assert fresh.returncode == 2 and fresh.stdout == "", fresh.stdout
    assert fresh.stderr.strip() == ("agl verify: error: nothing to verify yet: none of the 2 pipeline "
                                    "outputs is on disk; run `dvc repro` first (or `dvc pull` from a DVC remote)")


# Keys ending in `_s` a backend may put in a reply's meta that are durations of *audio* (decided
# by the clip and the settings), not wall time: they may stay in predictions.jsonl.
# (`parts_heard_s`: each audio part's seconds, long-audio multi_part; `duration_s`: the clip's
# length in the cascade's perception report.)
AUDIO_SECONDS = {"audio_s", "heard_s", "window_s", "parts_heard_s", "duration_s"}


def _declared_settings() -> set[str]:
    """Every settings key a backend declares (agl.backends.base): a `"x_s": rule` in those
    tables is a setting read from params.yaml, not a value measured into a reply's meta."""
    from agl.backends.base import COMMON_SETTINGS, SERVICE_SETTINGS, available_backends, get_backend

    keys = set(COMMON_SETTINGS) | set(SERVICE_SETTINGS)
    for name in available_backends():
        keys |= set(get_backend(name).settings_rules)
    return keys


def test_no_wall_time_a_backend_measures_reaches_a_tracked_record():
    """Every seconds-valued key a backend writes into a reply's meta is either a duration of
    audio or moved to the run's timings file (agl.inference.finalize.VOLATILE_META): a fresh
    run of langprior once recorded `listen_s` in predictions.jsonl, and agl verify failed."""
    import re

    from agl.inference.finalize import VOLATILE_META

    root = Path(__file__).resolve().parents[1] / "src" / "agl" / "backends"
    keys = {k for path in root.glob("*.py") for k in re.findall(r'"([a-z_]+_s)":', path.read_text())}
    assert keys, "no seconds-valued meta keys found: the scan is broken"
    keys -= _declared_settings()
    assert keys - AUDIO_SECONDS <= set(VOLATILE_META), sorted(keys - AUDIO_SECONDS - set(VOLATILE_META))
