"""DVC's repository lock, held by another DVC command, as one line instead of a traceback.

`agl verify` (DVC's `status`), its history of an output (DVC's cache) and `agl download`'s
caching of a pinned folder open the repository through DVC's Python API, which takes DVC's
lock (`.dvc/tmp/lock`; `.dvc/tmp/rwlock` for the paths a stage reads and writes). While
`dvc repro` runs, it holds that lock, and DVC raises `LockError` after about 3 s of retries:
that used to reach the terminal as a traceback. `dvc_lock_is_one_line` turns it into one line
naming the process that holds the lock (DVC writes its pid into the lock file), and what to
do: wait for it, or remove the lock if that process is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from agl.errors import AglError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _command(pid: int) -> str | None:
    """The command line of `pid` (Linux's /proc), shortened; None where it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    words = [w for w in raw.decode("utf-8", "replace").split("\0") if w]
    if not words:
        return None
    if len(words) > 1 and Path(words[0]).name.startswith("python") and words[1].endswith("dvc"):
        words = words[1:]  # `python .../bin/dvc repro`: the dvc command is what matters
    words[0] = Path(words[0]).name
    text = " ".join(words)
    return text if len(text) <= 80 else text[:77] + "..."


def _lock_pid(lock: Path) -> int | None:
    """The pid DVC wrote into its lock file: ` 1234` (zc.lockfile, the default) or
    `<lockfile>|<host>|<pid>|<random>` (flufl.lock, `core.hardlink_lock`)."""
    try:
        text = lock.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if text.isdigit():
        return int(text)
    fields = text.split("|")
    if len(fields) >= 3 and fields[-2].isdigit():
        return int(fields[-2])
    return None


def _rwlock_holders(tmp: Path) -> list[tuple[int, str]]:
    """(pid, command) of each process recorded in DVC's rwlock file."""
    try:
        doc = json.loads((tmp / "rwlock").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    infos = list((doc.get("write") or {}).values()) if isinstance(doc, dict) else []
    infos += [i for v in ((doc.get("read") or {}).values() if isinstance(doc, dict) else []) for i in v]
    seen = {(i["pid"], str(i.get("cmd", ""))) for i in infos
            if isinstance(i, dict) and isinstance(i.get("pid"), int)}
    return sorted(seen)


def busy_line(root: str | Path, command: str) -> str:
    """One line: who holds DVC's lock in `root`, and what to do (wait, or remove a stale lock)."""
    tmp = Path(root) / ".dvc" / "tmp"
    lock = tmp / "lock"
    pid = _lock_pid(lock)
    holders = [(pid, _command(pid) or "")] if pid is not None else _rwlock_holders(tmp)
    where = lock if pid is not None or not holders else tmp / "rwlock"
    if not holders:
        return (f"{root}: another DVC command holds DVC's lock ({lock}); wait for it to finish "
                f"and run `{command}` again")
    pid, cmd = holders[0]
    what = f"`{cmd}`" if cmd else "dvc repro (or another DVC command)"
    if _alive(pid):
        return (f"{root}: {what} is running (pid {pid}) and holds DVC's lock ({where}); wait "
                f"for it to finish and run `{command}` again")
    return (f"{root}: DVC's lock ({where}) names pid {pid}, which is no longer running: a stale "
            f"lock; remove {where} and run `{command}` again")


@contextlib.contextmanager
def dvc_lock_is_one_line(root: str | Path, command: str) -> Iterator[None]:
    """Run a block that opens `root` through DVC's API; DVC's `LockError` becomes an AglError
    (one line, `busy_line`)."""
    from dvc.lock import LockError  # DVC only where the caller already uses it
    from dvc.rwlock import RWLockFileCorruptedError

    check_lock_files(root)
    try:
        yield
    except LockError:
        raise AglError(busy_line(root, command)) from None
    except RWLockFileCorruptedError:
        path = Path(root) / ".dvc" / "tmp" / "rwlock"
        raise AglError(f"{path}: DVC's rwlock file is not the JSON DVC writes (corrupted); when no "
                       f"DVC command is running, remove it (rm {path}) and run `{command}` again") from None


LOCK_FILES = ("lock", "rwlock", "rwlock.lock")


def check_lock_files(root: str | Path) -> None:
    """DVC's lock files must be files: DVC opens them following links, so a link planted at
    `.dvc/tmp/rwlock` had DVC write its JSON into the link's target (and a link to /dev/null
    ended `agl verify` in a traceback). A link, a folder, a FIFO... is one line; nothing is
    opened through it. (A hard link is DVC's own `core.hardlink_lock`, and is fine.)"""
    import stat

    for name in LOCK_FILES:
        path = Path(root) / ".dvc" / "tmp" / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue  # absent: DVC makes it
        if stat.S_ISREG(mode):
            continue
        what = f"a symbolic link to {os.readlink(path)}" if stat.S_ISLNK(mode) else \
            "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise AglError(f"{path}: DVC's lock file is {what}, not a file DVC made; nothing was opened "
                       f"through it: remove it (rm {'-r ' if stat.S_ISDIR(mode) else ''}{path}) and "
                       "run again (DVC makes it anew)")
