"""The `ray` map executor: a stage's per-clip work as shards on a Ray cluster
(params.yaml `executor.kind: ray`, or AGL_EXECUTOR=ray); docs/cluster.md says where it runs.

The clip ids are cut into `executor.ray.shards` interleaved shards (`plan_shards`, the
planner inference uses) and served by a pool of actors (`executor.ray.actors`; null: one per
alive node, at most one per shard), `num_cpus` / `num_gpus` each. An actor runs the task's
`setup` once, on its first shard (Whisper, BirdNET, a tagger checkpoint load once per actor,
not per clip or per shard), then shard after shard; a shard returns its clips' results to
this process, which puts them back in the items' order: the stage writes what a local run
writes, byte for byte.

A node lost mid-stage: its actor restarts on another node (`max_restarts`) and the shards it
held run there again (`max_task_retries`, both `executor.ray.max_retries`). A shard's work is
a pure function of its clips, so running it again is safe; a stage that writes files per clip
(perturb) writes them whole and atomically (`agl.core.diskwrite`), the same bytes twice. A
shard that fails past its retries, or a task that raises, stops the stage in one line (an
AglError raised in a shard is re-raised as the local run's): curation outputs are written
whole, and a rerun starts over.

An actor works in the driver's folder (it changes to it first): the repository on a shared
filesystem mounted at the same path on every node, as the audio must be for inference
(docs/cluster.md). So a task's relative paths (data/audio/..., cache/speech, build/perturb/...)
name the same files on every node, and a row that names a path reads as a local run's.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from agl.errors import AglError
from agl.executor import ClipExecutor, ClipTask, Item
from agl.executor.config import RayConfig
from agl.executor.ray_connect import actor_pool_size, connect, require_ray, work_in
from agl.executor.shards import plan_shards


class _ClipActor:
    """One worker of the pool: the task's state loaded once, shard after shard."""

    def __init__(self, task: ClipTask, folder: str) -> None:
        import ray  # inside a Ray worker

        work_in(folder)  # this actor's own process: where every relative path starts
        self.task, self.state, self.ready = task, None, False
        self.node = ray.get_runtime_context().get_node_id()

    def where(self) -> str:
        return self.node

    def run(self, items: list[Item]) -> tuple[str, list[Any]]:
        if not self.ready:
            self.state, self.ready = self.task.setup(), True
        return self.node, [self.task.run(self.state, item) for item in items]


class _Lost(Exception):
    """A shard Ray could not run to its end (its actor's node died, the actor restarting):
    not the task's own error, so it may be sent again."""


class RayMap(ClipExecutor):
    """The items as shards on a pool of Ray actors; results back in the items' order."""

    name = "ray"  # its entry in the index (agl.executor)

    def __init__(self) -> None:
        self._facts: dict[str, Any] = {}

    def map(self, task: ClipTask, items: Sequence[Item], *, jobs: int, ray: RayConfig,
            progress: Callable[[int], None] | None) -> list[Any]:
        rt = require_ray()
        connect(rt, ray)
        t0 = time.time()
        by_key = {item[0]: item for item in items}
        shards = plan_shards(list(by_key), ray.shards)
        size = actor_pool_size(rt.nodes(), ray, len(shards))
        actor = rt.remote(_ClipActor).options(num_cpus=ray.num_cpus, num_gpus=ray.num_gpus,
                                              max_restarts=ray.max_retries,
                                              max_task_retries=ray.max_retries,
                                              scheduling_strategy="SPREAD")
        shared = rt.put(task)
        actors = [actor.remote(shared, os.getcwd()) for _ in range(size)]
        results: dict[str, Any] = {}
        served: list[dict[str, Any]] = []
        try:
            placed = [self._get(rt, a.where.remote(), f"actor {i}", ray.max_retries)
                      for i, a in enumerate(actors)]
            refs = {actors[n % size].run.remote([by_key[k] for k in ids]): n for n, ids in enumerate(shards)}
            pending = list(refs)
            lost: Counter[int] = Counter()
            while pending:
                done, pending = rt.wait(pending, num_returns=1)
                for ref in done:
                    n = refs.pop(ref)
                    try:
                        node, out = self._get(rt, ref, f"shard {n}", ray.max_retries, lost_ok=True)
                    except _Lost as exc:
                        # Its actor's node died: Ray restarts the actor elsewhere, but its own task
                        # retries can all be spent in the seconds the restart takes ("actor
                        # temporarily unavailable", seen under load). The shard goes again to the
                        # next actor after a pause, `max_retries` times, then the stage fails.
                        lost[n] += 1
                        if lost[n] > ray.max_retries:
                            raise AglError(f"ray: shard {n} failed (up to {ray.max_retries} retries): "
                                           f"{exc}; rerun the stage") from None
                        time.sleep(min(2.0 ** lost[n], 10.0))
                        again = actors[(n + lost[n]) % size].run.remote([by_key[k] for k in shards[n]])
                        refs[again] = n
                        pending.append(again)
                        continue
                    results.update(zip(shards[n], out, strict=True))
                    served.append({"shard": n, "node": node, "clips": len(out)})
                    if progress is not None:
                        progress(len(out))
        finally:  # done, failed or interrupted: no actor outlives the stage
            for a in actors:
                rt.kill(a, no_restart=True)
        self._facts = {"shards": len(shards), "actors": size, "actor_nodes": placed,
                       "shard_results": sorted(served, key=lambda r: r["shard"]),
                       "nodes": dict(Counter(r["node"] for r in served)),
                       "wall_s": round(time.time() - t0, 3)}
        return [results[item[0]] for item in items]

    @staticmethod
    def _get(rt: Any, ref: Any, what: str, retries: int, *, lost_ok: bool = False) -> Any:
        """`ray.get(ref)`, failures in one line: an AglError raised in a task as the local run's
        line, a task's own exception as itself, anything else (an actor that could not start,
        a shard lost past its retries) naming `what` failed, or, with `lost_ok`, as `_Lost` for
        the caller to send again."""
        try:
            return rt.get(ref)
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, AglError):  # the local run's one line, unwrapped
                raise AglError(str(cause)) from None
            if isinstance(cause, Exception):  # the task's own error: never retried, as locally
                raise cause from None
            text = str(exc).strip().splitlines()
            if lost_ok:
                raise _Lost(f"{type(exc).__name__}: {text[-1] if text else ''}"[:400]) from None
            raise AglError(f"ray: {what} failed (up to {retries} retries): {type(exc).__name__}: "
                           f"{text[-1] if text else ''}"[:400] + "; rerun the stage") from None

    def facts(self) -> dict[str, Any]:
        return {"ray": self._facts}
