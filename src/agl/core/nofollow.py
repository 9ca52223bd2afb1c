"""Files agl creates and writes without ever following a link it did not expect.

Two kinds of file are opened for writing at a path someone else could have planted
something at: the single-writer lock (`agl.core.single_writer`, in the shared temporary
folder) and every `.part` file (a download, a cached fetch, a staged manifest, beside
its target). `open(path, "wb")` follows a symlink there and truncates whatever it points
to: a link `/tmp/agl-folder-<digest>.lock -> ~/thesis.tex` used to leave the thesis at 0
bytes after `agl infer ... --out OUT`, and a link `data/audio/<key>/<clip>.mp3.part ->
~/.bashrc` made `agl download` write an MP3 into it.

So both are opened with `O_NOFOLLOW` and must be regular files with a single name (a hard
link is another name for someone's file): a symlink (dangling or not, to a file or to a
device), a folder, a FIFO or a socket at the path is refused in one line naming it and
what to do, and nothing is written through it. A `.part` opened from byte 0 is made anew
(`O_EXCL` after removing a stale regular one, so a link planted in between is refused by
the kernel, not followed); one resumed is appended to only if it is a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from agl.errors import AglError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    for test, word in _KINDS:
        if test(mode):
            return word
    return None


class NotARegularFile(AglError):
    """A path agl writes is a link, a folder, a FIFO... : refused, nothing written."""


def _refusal(path: Path, what: str, kind: str, advice: str) -> NotARegularFile:
    if kind == "a symbolic link":
        try:
            kind = f"a symbolic link to {os.readlink(path)}"
        except OSError:
            pass
    return NotARegularFile(f"{path}: {what} is {kind}, not a file agl made; nothing was written "
                           f"through it: {advice}")


def check_regular(path: str | Path, what: str, advice: str) -> os.stat_result | None:
    """The `lstat` of `path` if it is a regular file with one name, None if it does not exist;
    raises NotARegularFile (one line: the path, what it is, `advice`) otherwise."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    kind = _kind(st.st_mode)
    if kind is None and st.st_nlink > 1:
        kind = f"a hard link ({st.st_nlink} names for one file)"
    if kind is not None:
        raise _refusal(path, what, kind, advice)
    return st


def open_nofollow(path: str | Path, flags: int, what: str, advice: str, mode: int = 0o666) -> int:
    """`os.open(path, flags | O_NOFOLLOW | O_NONBLOCK)` refusing anything but a regular file
    with one name (checked on the open file, so nothing swapped in between gets through);
    a file descriptor. O_NONBLOCK: opening a FIFO must not wait for a reader."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.EEXIST, errno.ENXIO, errno.EOPNOTSUPP):
            check_regular(path, what, advice)  # names what is there
        raise  # no room, no rights: the caller's (or the CLI's) one line for a disk error
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is None and st.st_nlink > 1:
            kind = f"a hard link ({st.st_nlink} names for one file)"
        if kind is not None:
            raise _refusal(path, what, kind, advice)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_part(part: str | Path, append: bool = False, buffering: int = -1) -> BinaryIO:
    """A `.part` file opened for writing without following a link: from byte 0 (a stale
    regular part is removed, then the file is created with O_EXCL), or appended to (it
    must be a regular file already)."""
    part = Path(part)
    advice = f"remove it (rm {part}) and run again"
    if append:
        fd = open_nofollow(part, os.O_WRONLY | os.O_APPEND, "the partial download", advice)
    else:
        part.parent.mkdir(parents=True, exist_ok=True)  # as open(path, "wb") callers made it
        try:
            stale = stat.S_ISREG(os.lstat(part).st_mode)
        except FileNotFoundError:
            stale = False
        if stale:  # a stale part (or another name of some file): only this name goes
            part.unlink()
        fd = open_nofollow(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "the partial download", advice)
    return os.fdopen(fd, "ab" if append else "wb", buffering=buffering)


def write_part(part: str | Path, data: bytes) -> None:
    """`part.write_bytes(data)`, without following a link planted at `part`."""
    with open_part(part) as fh:
        fh.write(data)
