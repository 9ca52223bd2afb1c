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
