"""The suite's one toolbox: where the repository and ../shared are, work-folder copies of
the repository, environments for subprocesses, subprocess runs that fail showing their
output, and the skip rules for what a test needs from outside (shared data, Chromium,
PostgreSQL, espeak-ng).

A skip rule skips with the one command that provides the missing thing; in CI
(`AGL_REQUIRE_SHARED=1`, set by .ci/run, which installs every tool named here) the same
absence is a failure, so a missing tool can never turn into silently skipped tests.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# AGL_SHARED: where a checkout does not sit beside shared/ (e.g. a git worktree elsewhere).
SHARED = Path(os.environ.get("AGL_SHARED") or REPO.parent / "shared")
IN_CI = bool(os.environ.get("AGL_REQUIRE_SHARED"))

# The browser tests (report screenshots, the listening game) drive Debian's Chromium through
# Playwright (no downloaded browser). One reason, the README's one line: how to get it.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_MISSING = (f"{CHROMIUM} not found: the browser tests drive Debian's Chromium; install "
                    "it with `apt-get install -y chromium` (README: the tests; .ci/run does it)")
POSTGRES_MISSING = "PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)"
ESPEAK_MISSING = ("espeak-ng is not installed (apt-get install espeak-ng; .ci/run does it): "
                  "no synthetic speech to identify")


def missing(reason: str) -> None:
    """Skip with `reason`, or fail with it in CI, where everything is installed."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def shared_path(rel: str) -> Path:
    """A path under ../shared (test data), or a skip (a failure in CI) naming where it must be."""
    path = SHARED / rel
    if not path.exists():
        missing(f"{path} not found: ../shared (test data) must sit beside the checkout "
                "(or AGL_SHARED must name it)")
    return path


def require_chromium() -> Path:
    """Debian's Chromium, or a skip naming the one command that installs it (a failure in
    CI, which installs it)."""
    if not CHROMIUM.exists():
        missing(CHROMIUM_MISSING)
    pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' (Playwright)")
    return CHROMIUM


def postgres_available() -> bool:
    return bool(shutil.which("pg_config") or list(Path("/usr/lib/postgresql").glob("*/bin/initdb")))


def require_postgresql() -> None:
    if not postgres_available():
        missing(POSTGRES_MISSING)


def require_espeak() -> str:
    """The espeak-ng program, or a skip (a failure in CI, which installs it)."""
    found = shutil.which("espeak-ng")
    if found is None:
        missing(ESPEAK_MISSING)
    return found


# --------------------------------------------------------------------------- subprocesses
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t"}
# No network: a stage that tried to reach one would fail loudly instead of hanging.
NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}


def subprocess_env(root: Path = REPO, *, keys: bool = True, **extra: str) -> dict[str, str]:
    """The environment for an `agl`, `dvc` or `python` subprocess working on the checkout at
    `root`: its src/ first on PYTHONPATH (so a copy runs its own code), this interpreter's
    scripts first on PATH, DVC's analytics and the model hubs off, a git identity. `keys=False`
    drops every *_API_KEY; `extra` is added last."""
    env = dict(os.environ)
    if not keys:
        env = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}
    src = str(Path(root) / "src")
    env.update({"PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH", "")])),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                **GIT_IDENTITY})
    env.update(extra)
    return env


def run(cmd: str | list[str], cwd: Path | None = None, env: dict | None = None, *, ok: bool | None = True,
        timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    """Run `cmd` (a shell line when a string) capturing text output. `ok=True`: it must exit 0,
    else the test fails showing its stdout and stderr; `ok=False`: it must not; `None`: either."""
    done = subprocess.run(cmd, cwd=cwd, env=env if env is not None else subprocess_env(),
                          shell=isinstance(cmd, str), capture_output=True, text=True, timeout=timeout,
                          **kwargs)
    if ok is not None and (done.returncode == 0) != ok:
        pytest.fail(f"{cmd!r} exited {done.returncode}"
                    f"{'' if ok else ' (it should have failed)'}:\n{done.stdout}\n{done.stderr}", pytrace=False)
    return done


def sh(cmd: str | list[str], cwd: Path | None = None, env: dict | None = None, **kwargs) -> str:
    """Run `cmd`, which must succeed; its stdout and stderr together."""
    done = run(cmd, cwd, env, **kwargs)
    return done.stdout + done.stderr


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_agl(*argv: str) -> tuple[int, str, str]:
    """`agl ARGV` in this process: (exit status, stdout, stderr)."""
    from agl.cli import main  # the CLI's own imports stay out of tests that never call it

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def agl(*argv: str, cwd: Path | None = None, env: dict | None = None, ok: bool | None = None,
        **kwargs) -> subprocess.CompletedProcess:
    """`python -m agl.cli ARGV` with this interpreter (by default either exit status is fine)."""
    return run([sys.executable, "-m", "agl.cli", *argv], cwd, env, ok=ok, **kwargs)


# --------------------------------------------------------------------------- work folders
def copy_repo(dest: Path) -> Path:
    """A copy of the checkout's tracked and unignored files at `dest` (no .git, no build/)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


def copy_sources(dest: Path, *stages: str) -> Path:
    """src/agl (and the named stages/ scripts) copied to `dest`: a project small enough for
    one stage's `dvc repro`."""
    shutil.copytree(REPO / "src" / "agl", dest / "src" / "agl", ignore=shutil.ignore_patterns("__pycache__"))
    if stages:
        (dest / "stages").mkdir(parents=True, exist_ok=True)
        for script in stages:
            shutil.copy(REPO / "stages" / script, dest / "stages" / script)
    return dest


# --------------------------------------------------------------------------- the built demo
@dataclass(frozen=True)
class BuiltDemo:
    """The README's first command run once: `agl download && dvc repro` in a committed copy
    of the repository, offline, with MLflow on a SQLite file beside it."""

    work: Path  # the copy (a git repository; build/, .dvc/cache, dvc.lock as the run left them)
    db: Path  # its MLflow tracking database
    env: dict  # the environment it ran under (no keys, no network)
    out: str  # what `agl download && dvc repro` printed


def demo_env(work: Path, db: Path) -> dict:
    """No keys and no network (a stage that tried would fail loudly), MLflow on `db`."""
    return subprocess_env(work, keys=False, MLFLOW_TRACKING_URI=f"sqlite:///{db}", **NO_NETWORK)


def copy_built_demo(built: BuiltDemo, dest: Path) -> BuiltDemo:
    """A copy of the built demo (its git history and DVC cache too) that a
    test may change."""
    shutil.copytree(built.work, dest / "repo", symlinks=True)
    # A fresh MLflow database: the built one names the original's mlruns/ for artifacts.
    return BuiltDemo(dest / "repo", dest / "mlflow.db", demo_env(dest / "repo", dest / "mlflow.db"), built.out)


def one_line_error(capfd, argv: list[str]) -> str:
    """`agl ARGV` in-process: exit 2 and exactly one line on stderr, no traceback; the line."""
    from agl.cli import main

    rc = main(argv)
    err = capfd.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
