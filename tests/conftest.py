"""Shared fixtures. `../shared` (test and reference data) is found relative to the repo
(helpers.py holds the paths, the skip rules, subprocess runs and work-folder copies).

Where it is absent (a user's clone) tests that need it skip with a clear reason; in CI
(`AGL_REQUIRE_SHARED=1`, set by .ci/run) its absence is a failure instead.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from helpers import BuiltDemo, copy_repo, demo_env, sh, shared_path

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

@pytest.fixture(scope="session")
def shared():
    """A function: shared('data/agl1k/...') -> Path, skipping (or failing in CI) if absent."""
    return shared_path


@pytest.fixture(scope="session")
def agl1k_manifest() -> Path:
    return shared_path("data/agl1k/geoLocalization_schema.csv")


@pytest.fixture(scope="session")
def qwen_published() -> Path:
    return shared_path("data/agl1k/published/qwen25-omni/seed_42_progress_fixed.json")


@pytest.fixture(scope="session")
def archive_dir() -> Path:
    return shared_path("data/agl1k/archive")


@pytest.fixture(scope="session")
def real_mp3s(archive_dir) -> list[Path]:
    return sorted(archive_dir.glob("*/*.mp3"))


@pytest.fixture(scope="session")
def family_model(tmp_path_factory):
    """A function: family_model('qwen2_5_omni') -> the folder of that family's tiny random
    model (tests/tiny_models.py), built once per session."""
    from tiny_models import FAMILIES

    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = FAMILIES[name](tmp_path_factory.mktemp(name))
        return built[name]

    return get


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    """The demo set written once per session (manifest.csv, audio/), for tests that only read
    it: writing it costs seconds of MP3 encoding each time."""
    from agl.dataset.demo import write_demo

    root = tmp_path_factory.mktemp("demo-data")
    write_demo(root)
    return root


@pytest.fixture(scope="session")
def built_demo(tmp_path_factory, worker_id) -> BuiltDemo:
    """One demo pipeline run per test session, shared by the xdist workers: the first worker
    to need it builds it while holding a lock, a worker that needs it meanwhile waits, and
    every later test reads it (tests/test_pipeline_demo.py's first test asks first; the tests
    that only read it run last, see `pytest_collection_modifyitems`). Tests that change it
    work on a copy (helpers.copy_built_demo); none runs `dvc` in it but the first."""
    base = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        base = base.parent  # the session's folder, above each worker's own
    root = base / "built-demo"
    with open(base / "built-demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        work, db = root / "repo", root / "mlflow.db"
        env, done = demo_env(work, db), root / "built.txt"
        if done.is_file():
            return BuiltDemo(work, db, env, done.read_text())
        if root.exists():  # a build that failed in another worker: its failure is reported there
            pytest.fail(f"the demo build in {root} failed in another xdist worker (see its error)")
        root.mkdir()
        copy_repo(work)
        sh("git init -q && git add -A && git commit -qm init", work, env)
        out = sh("agl download && dvc repro", work, env)  # the README's first command, after install
        done.write_text(out)
        return BuiltDemo(work, db, env, out)


# The tests that only read the built demo: after everything else, so that the worker which
# builds it (for test_pipeline_demo's first test, handed out first) has finished by then.
DEMO_READERS = {"test_eee_demo.py", "test_explore_browser.py", "test_secrets_pipeline.py"}


# Not end-to-end, but minutes long (fresh processes running Whisper under two kernel ISAs;
# a real tagger on real MP3s): handed out early too, so they do not end the run.
LONG_FILES = {"test_kernels_isa.py", "test_tagging.py", "test_stage_deps.py"}


def pytest_collection_modifyitems(config, items):
    """The longest first: the xdist groups (team setup's, Ray's), the demo build and the other
    end-to-end (`slow`) tests, then the rest, then the readers of the built demo; each in
    file order. Under xdist (README's command) the workers start on the longest chains at
    once and share out the many short tests after; run alone, the order changes nothing else
    (no test depends on another's having run)."""
    def rank(item) -> int:
        if item.path.name in DEMO_READERS and "built_demo" in getattr(item, "fixturenames", ()):
            return 3
        if item.path.name == "test_pipeline_demo.py" and "reruns" in item.name:
            return 3
        if item.get_closest_marker("xdist_group") or item.name == "test_dvc_repro_on_the_demo_set_end_to_end":
            return 0
        return 1 if item.get_closest_marker("slow") or item.path.name in LONG_FILES else 2

    items.sort(key=rank)  # stable: file order within each rank
