"""Ray processes a killed driver left running, ended by the next run (issue 49).

A driver that starts a local Ray (`executor.ray.address: null`) and is killed with SIGKILL
cannot shut Ray down: its raylet and GCS follow it, but Ray's `DashboardAgent` and
`RuntimeEnvAgent` outlive it, reparented and idle, until the machine reboots. So each driver
that starts a local Ray notes its session folder in this user's temporary folder
(`agl-ray-<uid>/<driver pid>.json`), and the next driver to start one ends the processes of
every noted session whose driver is gone: those of this user holding a file open in the
session folder (the agents rename themselves `ray::DashboardAgent`, so their command line
no longer names it; their logs there stay open). A driver that exits normally shuts Ray down
and removes its note. Nothing of another user's, or of a live driver's session, is touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from agl.core import diskwrite


def notes_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"agl-ray-{os.getuid()}"


def note_session(session_dir: str) -> Path:
    """Note this driver's local Ray session (its folder), for the next run to clean up after."""
    path = notes_dir() / f"{os.getpid()}.json"
    diskwrite.write_text(path, json.dumps({"driver_pid": os.getpid(), "session_dir": session_dir}) + "\n")
    return path


def forget_session() -> None:
    """This driver shut its Ray down: nothing to clean up after it."""
    with contextlib.suppress(OSError):
        (notes_dir() / f"{os.getpid()}.json").unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holds(pid: str, session: str) -> bool:
    """Whether process `pid` (this user's) has a file open, or its folder, in `session`."""
    base = Path("/proc") / pid
    try:
        if base.stat().st_uid != os.getuid():
            return False
        links = [os.readlink(base / "cwd")]
        links += [os.readlink(base / "fd" / fd) for fd in os.listdir(base / "fd")]
    except OSError:
        return False
    return any(link == session or link.startswith(session + "/") for link in links)


def session_processes(session: str) -> list[int]:
    """This user's processes holding something open in the session folder `session`."""
    me = str(os.getpid())
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and p != me and _holds(p, session))


def end_leftovers(grace_s: float = 3.0) -> list[int]:
    """End the processes of every noted session whose driver is gone; returns their pids."""
    ended: list[int] = []
    folder = notes_dir()
    if not folder.is_dir() or not Path("/proc").is_dir():
        return ended
    for note in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(note.read_text(encoding="utf-8"))
            driver, session = int(doc["driver_pid"]), str(doc["session_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                note.unlink()
            continue
        if _alive(driver) or not session.startswith("/"):
            continue  # a live driver's Ray is its own
        pids = session_processes(session)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        ended += pids
        with contextlib.suppress(OSError):
            note.unlink()
    return ended
