"""Where a command may write: checked before any work, so a wrong path is one clear line
instead of an `IsADirectoryError` / `FileExistsError` traceback after minutes of work.
"""

from __future__ import annotations

from pathlib import Path

from agl.errors import AglError


def _blocked_parent(path: Path) -> Path | None:
    """The first ancestor of `path` that exists and is not a folder (it cannot hold files)."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def output_file(path: str | Path, flag: str) -> Path:
    """A file the command will (over)write: not a folder, and its folder can exist."""
    path = Path(path)
    if path.is_dir():
        raise AglError(f"{flag} {path}: is a folder; give a file name (e.g. {path / 'out.csv'})")
    blocked = _blocked_parent(path)
    if blocked is not None:
        raise AglError(f"{flag} {path}: {blocked} is a file, not a folder; choose another path")
    return path


def output_dir(path: str | Path, flag: str) -> Path:
    """A folder the command fills: not an existing file, and creatable."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AglError(f"{flag} {path}: is a file, not a folder; give a folder (it is created if absent)")
    blocked = _blocked_parent(path)
    if blocked is not None:
        raise AglError(f"{flag} {path}: {blocked} is a file, not a folder; choose another path")
    return path


def input_file(path: str | Path, flag: str, what: str) -> Path:
    """A file the command reads: it exists and is a file (not a folder)."""
    path = Path(path)
    if path.is_dir():
        raise AglError(f"{flag} {path}: is a folder; give the {what} file")
    if not path.exists():
        raise AglError(f"{flag} {path}: {what} file not found")
    return path
