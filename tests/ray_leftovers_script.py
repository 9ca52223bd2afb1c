"""Run by tests/test_ray_transport.py inside `unshare -n -p -f --mount-proc` (only this
script's processes are visible): a driver starts a local Ray through agl's connect, is killed
with SIGKILL, and the next driver's cleanup (agl.executor.ray_leftovers) ends what
it left. Prints one JSON object."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from agl.executor import ray_leftovers

DRIVER = """
import time
import ray
from agl.executor.ray_connect import connect
from agl.executor.config import RayConfig
connect(ray, RayConfig())
print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
time.sleep(600)
"""


def ray_processes() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, os.getpid()):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "ray" in cmd.lower():
                out.append(cmd.strip()[:60])
    return out


driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True)
session = driver.stdout.readline().strip()
os.kill(driver.pid, signal.SIGKILL)
driver.wait()
time.sleep(6)  # what dies with the driver has died
left = ray_processes()
ended = ray_leftovers.end_leftovers()
time.sleep(0.5)
print(json.dumps({"session": session, "left": left, "ended": len(ended), "after": ray_processes(),
                  "notes": sorted(p.name for p in ray_leftovers.notes_dir().glob("*.json"))}))
