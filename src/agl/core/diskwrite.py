"""Writes that fail for want of room or rights: one line, and nothing half-written kept.

A full disk (ENOSPC), a quota (EDQUOT), a file too large for its file system (EFBIG), a
read-only mount (EROFS) or a folder agl may not write (EACCES, EPERM) is not a bug in agl and
must not read as one (a traceback), nor leave a cut file under its final name that a later
reader takes for whole. `DiskError` is the one line: which file, what happened, what to do.
Every writer that renames a finished temporary file into place (`replace_atomically`) or
appends records (agl.predictions.records.PredictionWriter, truncating back what a failed
append left) raises it; the CLI and the stages turn any other such OSError into the same
line (`disk_error`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from agl.core.nofollow import open_nofollow, open_part
from agl.errors import AglError

_FULL = "free space on that disk (or write somewhere else), then rerun: what was written is kept"
_DENIED = "write somewhere you may write (or change the folder's permissions), then rerun"
_ACCESS = "read or write somewhere you may (or change the permissions), then rerun"
PROBLEMS = {
    errno.ENOSPC: ("cannot write: the disk is full", _FULL),
    errno.EDQUOT: ("cannot write: the disk quota is used up", _FULL),
    errno.EFBIG: ("cannot write: the file is too large for its file system",
                  "write it to another file system"),
    errno.EROFS: ("cannot write: the file system is read-only", _DENIED),
    errno.EACCES: ("permission denied", _ACCESS),
    errno.EPERM: ("operation not permitted", _ACCESS),
    # A path that names the wrong kind of thing (a params value such as `summary: build`).
    errno.EISDIR: ("is a folder where a file belongs", "give the path of a file (it is created if absent)"),
    errno.ENOTDIR: ("a part of this path is a file where a folder belongs", "give a path through folders"),
    errno.ENAMETOOLONG: ("the name is too long for the file system", "give a shorter path"),
}
# What a server says for each (the listening game): 507 Insufficient Storage for room,
# 503 Service Unavailable for a folder it may not write.
HTTP_STATUS = {errno.ENOSPC: 507, errno.EDQUOT: 507, errno.EFBIG: 507}


class DiskError(AglError):
    """A write refused by the file system; `errno` says which way."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.errno = code

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.errno, 503)


def disk_error(exc: BaseException, path: str | Path | None = None) -> DiskError | None:
    """The one line for an OSError of the kinds above (None for any other error)."""
    if not isinstance(exc, OSError) or exc.errno not in PROBLEMS:
        return None
    what, todo = PROBLEMS[exc.errno]
    where = path or exc.filename or "a file"
    return DiskError(f"{where}: {what}; {todo}", exc.errno)


def replace_atomically(path: str | Path, data: bytes) -> Path:
    """`data` written to a temporary file beside `path`, synced, then renamed over it: a
    reader sees the old file or the new one, never half; on a failed write the temporary
    is removed and the old file (if any) left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open_part(tmp) as fh:  # never through a link planted at the guessable name
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a read-only folder may refuse this too
            tmp.unlink(missing_ok=True)
        err = disk_error(exc, path)
        if err is None:
            raise
        raise err from None
    return path


# --- The one way a file is written whole -------------------------------------------------
# Every writer of the project calls one of these three (tests/test_writers.py finds every
# write primitive in the source and fails on one outside this module): the data goes to a
# temporary beside the target, opened O_NOFOLLOW|O_EXCL (agl.core.nofollow), is synced and
# renamed over the final name. A link planted at the final name is replaced as a link, never
# followed (its target keeps its bytes); a full disk leaves the old file, never a cut one.


def write_bytes(path: str | Path, data: bytes) -> Path:
    """`data` as the whole of `path` (its folder made if absent), atomically, without
    following a link."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise disk_error(exc, path.parent) or exc from None
    return replace_atomically(path, data)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """`text` as the whole of `path` (bytes as given: "\\n" stays "\\n" on every OS)."""
    return write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "wb", encoding: str = "utf-8"):
    """A file object to stream a whole file into (`mode` "wb" or "w"): it is written to a
    no-follow temporary beside `path` and renamed over it only if the block ends without an
    error; otherwise the temporary is removed and `path` is left as it was. For writers that
    hand a file object to a library (matplotlib, NumPy, a JSON encoder)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_file mode {mode!r}: 'wb' or 'w'")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_part(tmp) as raw:
            if mode == "w":
                import io

                fh = io.TextIOWrapper(raw, encoding=encoding, newline="")
                yield fh
                fh.flush()
                fh.detach()
            else:
                yield raw
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        err = disk_error(exc, path)
        if err is None:
            raise
        raise err from None


def append_text(path: str | Path, text: str) -> None:
    """`text` appended to a log file (created if absent) without following a link at `path`
    (agl.core.nofollow): for logs a user reads, not records a run resumes from."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "the log file",
                           f"remove it (rm {path}) or name another file")
        with os.fdopen(fd, "ab") as fh:
            fh.write(text.encode("utf-8"))
    except OSError as exc:
        raise disk_error(exc, path) or exc from None
