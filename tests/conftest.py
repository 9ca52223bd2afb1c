"""Shared fixtures. `../shared` (test and reference data) is found relative to the repo
(helpers.py holds the paths, the skip rules, subprocess runs and work-folder copies).

Where it is absent (a user's clone) tests that need it skip with a clear reason; in CI
(`AGL_REQUIRE_SHARED=1`, set by .ci/run) its absence is a failure instead.
"""

from __future__ import annotations

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
def built_demo(tmp_path_factory) -> BuiltDemo:
    """One demo pipeline run per session (per xdist worker: the tests that read it share the
    xdist group "demo", so one worker builds it). Tests that change it work on a copy
    (helpers.copy_built_demo)."""
    root = tmp_path_factory.mktemp("built-demo")
    work, db = copy_repo(root / "repo"), root / "mlflow.db"
    env = demo_env(work, db)
    sh("git init -q && git add -A && git commit -qm init", work, env)
    out = sh("agl download && dvc repro", work, env)  # the README's first command, after install
    return BuiltDemo(work, db, env, out)


# Not end-to-end, but minutes long (fresh processes running Whisper under two kernel ISAs;
# a real tagger on real MP3s): handed out early too, so they do not end the run.
LONG_FILES = {"test_kernels_isa.py", "test_tagging.py", "test_stage_deps.py"}


def pytest_collection_modifyitems(config, items):
    """The longest first: the xdist groups (the built demo's, team setup's), then the other
    end-to-end (`slow`) tests, then the rest, each in file order. Under xdist (README's
    command) the workers start on the longest chains at once and share out the many short
    tests after; run alone, the order changes nothing else (no test depends on another's
    having run)."""
    def rank(item) -> int:
        if item.get_closest_marker("xdist_group"):
            return 0
        return 1 if item.get_closest_marker("slow") or item.path.name in LONG_FILES else 2

    items.sort(key=rank)  # stable: file order within each rank
