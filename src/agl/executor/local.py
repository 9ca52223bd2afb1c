"""The `local` map executor: a stage's per-clip work on this host's cores (the stage's `jobs`).

`jobs: 1` runs every clip in this process: no process to start, no second import of numpy
or a model's library, so on a small set (the demo's 32 short clips) it is the cheapest in
CPU. More jobs are a pool of spawned processes (spawn, not fork: the parent may hold torch,
ONNX Runtime or OpenMP threads, and a forked child of a multi-threaded process can
deadlock); each loads the task's model once, on its first clip. `pool.map` hands results
back in the items' order, so the bytes a stage writes are the same for any `jobs`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from agl.executor import ClipExecutor, ClipTask, Item
from agl.executor.config import RayConfig

_worker: dict[str, Any] = {}  # in a pool process: its task and what the task's setup loaded


def _adopt(task: ClipTask) -> None:
    _worker.clear()
    _worker["task"] = task


def _run_one(item: Item) -> Any:
    task = _worker["task"]
    if "state" not in _worker:  # loaded on the first clip: a process given none loads nothing
        _worker["state"] = task.setup()
    return task.run(_worker["state"], item)


class LocalMap(ClipExecutor):
    """This process (`jobs` 1) or a pool of `jobs` spawned processes."""

    name = "local"  # its entry in the index (agl.executor)

    def __init__(self) -> None:
        self.jobs = 1

    def map(self, task: ClipTask, items: Sequence[Item], *, jobs: int, ray: RayConfig,
            progress: Callable[[int], None] | None) -> list[Any]:
        self.jobs = max(1, min(jobs, len(items), os.cpu_count() or 1))
        tick = progress or (lambda n: None)
        out = []
        if self.jobs == 1:
            state = task.setup()
            for item in items:
                out.append(task.run(state, item))
                tick(1)
            return out
        with ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"),
                                 initializer=_adopt, initargs=(task,)) as pool:
            for result in pool.map(_run_one, items, chunksize=1):
                out.append(result)
                tick(1)
        return out

    def facts(self) -> dict[str, Any]:
        return {"jobs": self.jobs}
