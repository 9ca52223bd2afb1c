"""Shared fixtures. `../shared` (test and reference data) is found relative to the repo.

Where it is absent (a user's clone) tests that need it skip with a clear reason; in CI
(`AGL_REQUIRE_SHARED=1`, set by .ci/run) its absence is a failure instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# AGL_SHARED: where a checkout does not sit beside shared/ (e.g. a git worktree elsewhere).
SHARED = Path(os.environ.get("AGL_SHARED") or REPO.parent / "shared")

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _shared_path(rel: str) -> Path:
    path = SHARED / rel
    if not path.exists():
        msg = f"{path} not found: ../shared (test data) must sit beside the checkout"
        if os.environ.get("AGL_REQUIRE_SHARED"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


# The browser tests (report screenshots, the listening game) drive Debian's Chromium through
# Playwright (no downloaded browser). One reason, the README's one line: how to get it.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_MISSING = (f"{CHROMIUM} not found: the browser tests drive Debian's Chromium; install "
                    "it with `apt-get install -y chromium` (README: the tests; .ci/run does it)")


def require_chromium() -> Path:
    """Debian's Chromium, or a skip naming the one command that installs it (a failure in
    CI, which installs it)."""
    if not CHROMIUM.exists():
        if os.environ.get("AGL_REQUIRE_SHARED"):
            pytest.fail(CHROMIUM_MISSING)
        pytest.skip(CHROMIUM_MISSING)
    pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' (Playwright)")
    return CHROMIUM


@pytest.fixture(scope="session")
def shared():
    """A function: shared('data/agl1k/...') -> Path, skipping (or failing in CI) if absent."""
    return _shared_path


@pytest.fixture(scope="session")
def agl1k_manifest() -> Path:
    return _shared_path("data/agl1k/geoLocalization_schema.csv")


@pytest.fixture(scope="session")
def qwen_published() -> Path:
    return _shared_path("data/agl1k/published/qwen25-omni/seed_42_progress_fixed.json")


@pytest.fixture(scope="session")
def archive_dir() -> Path:
    return _shared_path("data/agl1k/archive")


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
