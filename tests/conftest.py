"""Shared fixtures. `../shared` (test and reference data) is found relative to the repo
(helpers.py holds the paths, the skip rules, subprocess runs and work-folder copies).

Where it is absent (a user's clone) tests that need it skip with a clear reason; in CI
(`AGL_REQUIRE_SHARED=1`, set by .ci/run) its absence is a failure instead.
"""

from __future__ import annotations

import fcntl
import gc
import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import BuiltDemo, copy_repo, demo_env, sh, shared_path

# Python's default, whatever the host says: compiled modules are cached beside their sources.
# A host with PYTHONDONTWRITEBYTECODE=1 (this sandbox) made every stage, CLI and worker process
# compile src/agl anew, and hid that a researcher's `dvc repro` writes __pycache__/ into the
# folders stages declare (.dvcignore keeps it out of their hashes; the demo build proves it).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
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


def _session_dir(tmp_path_factory, config) -> Path:
    """The folder every xdist worker of this session sees (above each worker's own). Not the
    `worker_id` fixture: tests/ray_suite.py runs in a pytest of its own without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory, pytestconfig) -> Path:
    """The demo set written once per test session (manifest.csv, audio/), shared by the xdist
    workers as `built_demo` is (the first to need it writes it under a lock): for tests that
    only read it. Writing it costs about 5 CPU-seconds of MP3 encoding each time; a test that
    changes it works on a copy (`fresh_demo`)."""
    from agl.dataset.demo import write_demo

    base = _session_dir(tmp_path_factory, pytestconfig)
    root, done = base / "demo-data", base / "demo-data.done"
    with open(base / "demo-data.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            if root.exists():  # a write that failed in another worker
                pytest.fail(f"writing the demo set in {root} failed in another xdist worker (see its error)")
            write_demo(root)
            done.write_text("ok\n")
    return root


@pytest.fixture(scope="session")
def fresh_demo(demo_data):
    """A function: fresh_demo(dest) -> dest, a copy of the session's demo set that a test may
    change (what `agl.dataset.demo.write_demo(dest)` would write, without encoding it again)."""
    def copy(dest: Path) -> Path:
        shutil.copytree(demo_data, dest, symlinks=True)
        return dest

    return copy


@pytest.fixture(scope="session")
def built_demo(tmp_path_factory, pytestconfig) -> BuiltDemo:
    """One demo pipeline run per test session, shared by the xdist workers: the first worker
    to need it builds it while holding a lock, a worker that needs it meanwhile waits, and
    every later test reads it (under xdist the build and its readers are one group, `demo`, run
    by one worker: see `pytest_collection_modifyitems`; the team group, on another worker,
    waits for it if it comes first). Tests that change it
    work on a copy (helpers.copy_built_demo); none runs `dvc` in it but the first."""
    base = _session_dir(tmp_path_factory, pytestconfig)
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


# The tests that read the built demo (or change a copy of it): one xdist group with the build
# itself (`demo`), so the worker that builds it runs them next, the longest first, and no other
# worker sits waiting on the build's lock (see `pytest_collection_modifyitems`).
DEMO_READERS = ("test_pipeline_demo.py::test_reruns", "test_secrets_pipeline.py", "test_explore_browser.py",
                "test_eee_demo.py")
DEMO_BUILD = "test_dvc_repro_on_the_demo_set_end_to_end"

# Not end-to-end, but minutes long (fresh processes running Whisper under two kernel ISAs;
# a real tagger on real MP3s): handed out early too, so they do not end the run.
LONG_FILES = {"test_kernels_isa.py", "test_tagging.py", "test_stage_deps.py"}

# Modules whose module- or session-scoped fixture or cache costs seconds (a BirdNET run, a
# counterfactual experiment, a report over 1,444 clips, the docs' `--help` outputs): one xdist
# group each, so one worker builds it once. Handed out one test at a time, a module's tests
# alternate between the workers, and pytest sets up a module fixture again each time a worker
# comes back to its module.
MODULE_GROUPS = {"test_counterfactual.py", "test_birds.py", "test_report.py", "test_docs.py"}


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown where it is off (tests/ray_suite.py)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (the README's command): one worker more than the cores this process may use.
    Some tests wait (servers starting, timeouts running out, a Ray cluster, browsers); the
    extra worker fills those waits: with it both cores were 1.88 busy on average, machine-wide
    (docs/testing.md, How long).
    PYTEST_XDIST_AUTO_NUM_WORKERS, when set, is xdist's own override and wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


def pytest_configure(config):
    # xdist's loadgroup hands out its work units (an xdist group, or a single test) largest
    # group first unless told otherwise, which put the team group's five tests ahead of the
    # demo build and the Ray suite: the order below is the order they are handed out in.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """The order the work is handed out in under xdist (`-n auto --dist loadgroup`, the
    README's command), which gives each worker its first unit, then one more each, then tops a
    worker up one unit at a time whenever two or fewer of its tests are pending:

    1. the `demo` group (the build, then the tests that read it): the first worker;
    2. the Ray group (the mini-cluster suite): the second worker, at once;
    3. one long test: the third worker, if any (with two, the second worker's next unit);
    4. the team group (PostgreSQL, MLflow, a copy of the built demo): the second worker's next
       unit, after Ray (by then the build is about done);
    5. the other end-to-end (`slow`) and long tests, then the many short ones, which even out
       the end. Each in file order. Run alone, the order changes nothing else (no test
       depends on another's having run)."""
    for item in items:
        if item.name == DEMO_BUILD or reader(item) is not None:
            item.add_marker(pytest.mark.xdist_group("demo"))
        elif item.path.name in MODULE_GROUPS:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))

    def rank(item) -> int:
        if group(item) == "demo":
            return 0
        if group(item) == "ray":
            return 1
        if group(item) == "team":
            return 3
        return 4 if item.get_closest_marker("slow") or item.path.name in LONG_FILES else 5

    def within(item) -> int:  # the build first, then its readers, the longest first
        return -1 if item.name == DEMO_BUILD else (reader(item) or 0)

    items.sort(key=lambda item: (rank(item), within(item)))  # stable: file order within each
    long = next((i for i, item in enumerate(items) if rank(item) == 4 and group(item) is None), None)
    if long is not None:  # 3. above: between the Ray group and the team group
        at = next((i for i, item in enumerate(items) if rank(item) > 1), 0)
        items.insert(at, items.pop(long))


# The cyclic garbage collector walks every live object on each full collection, and a worker
# holds millions once torch, transformers, MLflow and pandas are imported: a sixth of a
# worker's CPU went to it (16 of 89 CPU-seconds on five modules' tests; 6 with the below).
# What is alive after collection, and after a test that imported many modules, lives as long
# as the process: it is collected once and then frozen (`gc.freeze`), out of later
# collections. Garbage is still freed as before; only frozen objects are never collected.
_FROZEN_AT = [0]  # how many modules were loaded at the last freeze
NEW_MODULES_TO_FREEZE = 50  # a heavy library's worth (torch alone brings hundreds)


def pytest_collection_finish(session):
    _freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # after the test's fixtures are torn down: what they held is not frozen
    if len(sys.modules) > _FROZEN_AT[0] + NEW_MODULES_TO_FREEZE:
        _freeze()


def _freeze() -> None:
    gc.collect()
    gc.freeze()
    _FROZEN_AT[0] = len(sys.modules)


def group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return (mark.args[0] if mark.args else mark.kwargs.get("name", "default")) if mark else None


def reader(item) -> int | None:
    where = f"{item.path.name}::{item.name}"
    return next((i for i, r in enumerate(DEMO_READERS) if where.startswith(r)), None)
