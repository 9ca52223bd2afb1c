"""Where shared state lives when DVC runs a stage in a throwaway copy of the repository.

A queued experiment (`dvc exp run --queue`, `dvc queue start`) runs in a temporary workspace
(`.dvc/tmp/exps/tmp<random>`) holding the git commit plus DVC-tracked data checked out from the
shared DVC cache. Git-ignored state is not there: the reply and judge caches (`cache/`) and
the default MLflow store (`mlflow.db`). DVC names the real repository in `DVC_ROOT`; relative
cache paths resolve against it, so a queued experiment reuses (and fills) the same caches
as the workspace, and nothing already answered is asked again. The caches are
content-addressed with atomic writes, so parallel experiments can share them.
"""

from __future__ import annotations

import os
from pathlib import Path


def shared_root() -> Path | None:
    """The repository a queued DVC experiment belongs to, when running inside one."""
    root = os.environ.get("DVC_ROOT")
    if not root:
        return None
    root_path = Path(root).resolve()
    return None if root_path == Path.cwd().resolve() else root_path


def shared_path(path: str | Path) -> Path:
    """`path` (a cache folder from params.yaml) resolved against the real repository when
    running in an experiment's temporary workspace; unchanged otherwise or if absolute."""
    p = Path(path)
    root = shared_root()
    return p if p.is_absolute() or root is None else root / p


def enclosing_project(start: Path | None = None) -> Path | None:
    """The nearest folder above `start` (the working directory) holding both dvc.yaml and
    params.yaml: the agl project `start` sits inside, when it is not its root."""
    here = (start or Path.cwd()).resolve()
    if (here / "dvc.yaml").is_file() and (here / "params.yaml").is_file():
        return None
    for parent in here.parents:
        if (parent / "dvc.yaml").is_file() and (parent / "params.yaml").is_file():
            return parent
    return None


def refuse_inside_project(command: str, writes: str) -> None:
    """One line instead of a second data/ or build/ inside a subfolder of the project (run
    from docs/, `agl download` once made docs/data/ from the built-in defaults and exited 0)."""
    from agl.errors import AglError  # lazy: only a refusal needs it

    root = enclosing_project()
    if root is not None:
        raise AglError(f"run `{command}` from the project's root, {root} (here, in {Path.cwd()}, there is "
                       f"no params.yaml and it would write {writes} here); or name the folder with --out")


def refuse_outside_root(command: str) -> None:
    """One line naming the project's root when a command that reads the project's files by
    their paths from the root (dvc.lock, params.yaml, build/, data/) runs in a subfolder of it:
    from docs/, `agl verify` said there was no dvc.lock and `agl report` to run the evaluate
    stage first, sending the user the wrong way. (git and dvc find the root themselves; agl's
    paths are the user's own, relative to where they typed them, so it names the root instead.)"""
    from agl.errors import AglError  # lazy: only a refusal needs it

    root = enclosing_project()
    if root is not None:
        raise AglError(f"run `{command}` from the project's root: cd {root} (here, in {Path.cwd()}, "
                       "there is no params.yaml; it reads dvc.lock, params.yaml, build/ and data/ "
                       "from where it runs)")
