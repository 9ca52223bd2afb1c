"""One writer per folder: an exclusive, non-blocking `flock(2)` held for the whole run.

Two `agl download` runs into the same folder would race on the same `.part` files and
rewrite each other's `lock.json`. The second one refuses at once, naming the process that
holds the folder. The kernel releases the lock when the holder exits, however it exits
(kill -9 included), so a stale lock never blocks the next run.

The lock file lives in the system's temporary folder, named by the folder's resolved path,
not inside the folder: that is DVC-tracked data (an extra file would change its hash), and
it may not exist yet (a run refused for a bad manifest must leave no folder behind). The
file's text (pid, command, start time) is only for the refusal message. That folder is
shared: the lock file is opened without following a link and must be a regular file
(`agl.core.nofollow`), so a link planted at its name is refused, never truncated through.
The holder removes the file as it lets go, so the temporary folder does not collect one file
per folder ever locked; one left by a holder killed with -9 is taken by the next run (and then
removed). A process that opened the file just before its removal sees that the name is gone
and opens it anew, so two writers can never hold two different files for one folder.

Re-entrant within one thread: `flock` locks belong to an open file, so a second
`exclusive` on the same folder in the same process would refuse itself. An inference run
holds its folder for the whole run, and batch mode (agl.inference.executors.batch) asks for the same
folder inside it: that is the same writer, one lock, never two nested ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from agl.core.nofollow import open_nofollow
from agl.errors import AglError


def lock_path(folder: str | Path) -> Path:
    digest = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"agl-folder-{digest}.lock"


# Lock files this process holds: path -> (holding thread, depth).
_HELD: dict[Path, tuple[int, int]] = {}
_HELD_GUARD = threading.Lock()


@contextlib.contextmanager
def exclusive(folder: str | Path, what: str) -> Iterator[None]:
    """Hold `folder` for the duration of the block; AglError if another process (or another
    thread of this one) holds it. The thread holding it may enter again (see above)."""
    path, me = lock_path(folder), threading.get_ident()
    with _HELD_GUARD:
        holder, depth = _HELD.get(path, (None, 0))
        if holder == me:
            _HELD[path] = (me, depth + 1)
    if holder == me:
        try:
            yield
        finally:
            with _HELD_GUARD:
                _HELD[path] = (me, depth)
        return
    with _flock(path, folder, what):
        with _HELD_GUARD:
            _HELD[path] = (me, 1)
        try:
            yield
        finally:
            with _HELD_GUARD:
                _HELD.pop(path, None)


def _names(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd` (a holder removes the name as it
    releases the lock: a file opened just before that is no longer the lock)."""
    held = os.fstat(fd)
    try:
        named = os.lstat(path)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _take(path: Path, folder: str | Path, what: str) -> int:
    """An open descriptor of the lock file, locked, that `path` still names."""
    import fcntl

    while True:
        # never through a link planted at the path (it would truncate the file it points to)
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, f"the lock file of {folder}",
                           f"remove it (it only names the process writing into {folder}) "
                           "and run again")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 400, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise AglError(
                f"{folder}: another process is writing into this folder "
                f"({holder or 'holder unknown'}); wait for it to finish, or use "
                f"another folder for {what}"
            ) from None
        if _names(fd, path):
            return fd
        os.close(fd)  # the previous holder removed this name as it let go: open it anew


@contextlib.contextmanager
def _flock(path: Path, folder: str | Path, what: str) -> Iterator[None]:
    import fcntl

    fd = _take(path, folder, what)
    try:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        cmd = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "python"
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {cmd[:200]}, since {started}".encode(), 0)
        try:
            yield
        finally:
            # The name goes while the lock is still held, so no file is left behind per
            # folder ever locked; a process that opened it meanwhile sees it unnamed (_take).
            if _names(fd, path):
                os.unlink(path)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
