"""The `ray` executor: a run's pending clips as shards on a Ray cluster (params.yaml
`executor.kind: ray`, or `agl infer --executor ray`); docs/cluster.md says where it runs.

The driver (this process) stays the one writer: it leaves out what the reply cache answers,
cuts the rest into shards (`agl.executor.shards.plan_shards`), and turns every reply a shard
posts into a record through its sink, writing the cache entry too. Shards never touch a file.

* API backends (gemini, openai, openai-compatible, the baselines): one Ray task per shard,
  each running the async runner with the run's concurrency, retries and Retry-After cap;
  `max_retries` reruns a shard whose node died, elsewhere.
* A backend that loads a model into its process (`Backend.loads_model`: transformers), or
  builds its state from the whole dataset (`reads_dataset`: knn, prior): a pool of actors
  (`num_gpus` each); an actor loads the model (or the dataset) once and serves shard after
  shard (batching as in a local run); an actor whose node died restarts elsewhere.
  vLLM is never run inside Ray: it stays a set of servers (`base_url` replicas).

Replies go to a collector actor pinned to the driver's node, which keeps the ids answered: a
retried shard asks only for what is missing, a reply posted twice (a shard retried while its
first attempt's request was in flight) is counted and dropped, never written twice. The merge
checks coverage: a clip no shard answered (its shard failed past its retries) is recorded as
FAILED with the reason, and a rerun asks it again. Node, shard and timing facts go to the
summary's `ray` section, which the run's timings file holds (never a tracked output).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend
from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.core.reach import NoNetwork
from agl.errors import ModelGone
from agl.executor.config import RayConfig
from agl.executor.ray_connect import actor_pool_size, connect, require_ray, work_in
from agl.executor.shards import plan_shards
from agl.inference.cache import ResponseCache
from agl.inference.executors import Executor
from agl.inference.runner import lookup, remember
from agl.inference.shards import build_backend, serve_shard
from agl.inference.work import Answer, Sink, Work

POLL_S = 0.1  # how often the driver collects posted replies (and refreshes its progress bar)


class _Collector:
    """The replies posted by every shard of one run, until the driver takes them (an actor on
    the driver's node: it outlives any worker node)."""

    def __init__(self) -> None:
        self.answered: dict[str, int] = {}
        self.buffer: list[tuple[str, Reply]] = []
        self.duplicates: Counter = Counter()
        self.attempts: list[dict[str, Any]] = []

    def start(self, shard: int, node: str, ids: list[str]) -> list[str]:
        """Shard `shard` starts (again) on `node`: the ids of its that no shard answered yet."""
        self.attempts.append({"shard": shard, "node": node, "at": round(time.time(), 3)})
        return [i for i in ids if i not in self.answered]

    def put(self, shard: int, node: str, items: list[tuple[str, Reply]]) -> None:
        for sid, reply in items:
            if sid in self.answered:
                self.duplicates[sid] += 1  # an in-flight request the retry asked again
                continue
            self.answered[sid] = shard
            self.buffer.append((sid, reply))

    def take(self) -> list[tuple[str, Reply]]:
        out, self.buffer = self.buffer, []
        return out

    def facts(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "duplicates": dict(self.duplicates),
                "answered": sorted(self.answered)}


def _shard_task(work: Work, requests: tuple[Request, ...], shard: int, collector: Any,
                folder: str) -> dict[str, Any]:
    """One shard of an API backend: its own backend, the async runner, replies posted."""
    import ray  # inside a Ray worker

    work_in(folder)  # a backend's relative settings (the cascade's perception folder) as the driver's
    node = ray.get_runtime_context().get_node_id()
    return serve_shard(replace(work, requests=requests), shard, build_backend(work), collector, node,
                       close=True)


class _ModelActor:
    """One loaded model (transformers), or one dataset-wide state (knn's features), serving
    shard after shard on its node's devices."""

    def __init__(self, work: Work, folder: str) -> None:
        import ray  # inside a Ray worker

        work_in(folder)
        self.work, self.backend = work, build_backend(work)  # the weights load on the first clip
        self.node = ray.get_runtime_context().get_node_id()

    def serve(self, requests: tuple[Request, ...], shard: int, collector: Any) -> dict[str, Any]:
        return serve_shard(replace(self.work, requests=requests), shard, self.backend, collector,
                           self.node, close=False)


class RayExecutor(Executor):
    """The pending clips as shards on a Ray cluster; this process writes every record."""

    name = "ray"  # its entry in the index (agl.inference.executors)

    def check(self, out_dir: Path) -> None:
        """Ray installed (else one line saying how), and no live batch jobs of the run."""
        require_ray()
        super().check(out_dir)

    async def answer(self, work: Work, backend: Backend, sink: Sink) -> dict[str, Any]:
        ray = require_ray()
        cfg = work.options.transport.ray
        connect(ray, cfg)
        t0 = time.time()
        cache = ResponseCache(work.options.cache_dir) if work.options.cache_dir is not None else None
        pending = []
        for request in work.requests:  # what the cache answers never reaches a shard
            hit = await lookup(backend, request, cache)
            if hit is not None:
                await sink.put(Answer(request, hit))
            else:
                pending.append(_absolute(request))
        by_id = {r.sample_id: r for r in pending}
        shards = plan_shards(list(by_id), cfg.shards)
        report: dict[str, Any] = {"shards": len(shards), "from_cache": len(work.requests) - len(pending)}
        if shards:
            run = _ClusterRun(ray, cfg, _portable(work), backend)
            await run.go(shards, by_id, sink, cache)
            report.update(run.facts())
        report["wall_s"] = round(time.time() - t0, 3)
        return report

    def summarize(self, summary: dict[str, Any], chosen: Sequence[Any], settings: dict[str, Any],
                  out_dir: Path, report: Any) -> dict[str, Any]:
        """The nodes, shards and timings: `ray` (a volatile section: the timings file's)."""
        return {**summary, "ray": report} if report is not None else summary


class _ClusterRun:
    """One run's shards in flight: submitted, collected, cancelled, merged."""

    def __init__(self, ray: Any, cfg: RayConfig, work: Work, backend: Backend):
        self.ray, self.cfg, self.work, self.backend = ray, cfg, work, backend
        self.results: list[dict[str, Any]] = []
        self.errors: dict[int, str] = {}
        self.actors: list[Any] = []
        self.collector: Any = None
        self.collected: dict[str, Any] = {}

    async def go(self, shards: list[tuple[str, ...]], by_id: dict[str, Request], sink: Sink,
                 cache: ResponseCache | None) -> None:
        ray = self.ray
        self.collector = self._collector()
        refs = self._submit(shards, by_id)
        todo = dict(refs)
        try:
            while todo:
                done, _ = ray.wait(list(todo), num_returns=len(todo), timeout=0)
                for ref in done:
                    self._finished(todo.pop(ref), ref)
                await self._drain(by_id, sink, cache)
                if todo:
                    await asyncio.sleep(POLL_S)
        except BaseException:  # Ctrl-C or a failed write: stop the shards, keep what came
            for ref in todo:
                ray.cancel(ref, force=not self.actors)
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
            await self._drain(by_id, sink, cache)
            ray.kill(self.collector, no_restart=True)
            raise
        await self._drain(by_id, sink, cache)
        self.collected = ray.get(self.collector.facts.remote())
        ray.kill(self.collector, no_restart=True)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        await self._merge(shards, by_id, sink)

    def _collector(self) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # Ray's own

        here = self.ray.get_runtime_context().get_node_id()
        self.driver_node = here
        cls = self.ray.remote(num_cpus=0)(_Collector)
        return cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()

    def _submit(self, shards: list[tuple[str, ...]], by_id: dict[str, Request]) -> dict[Any, int]:
        ray, cfg = self.ray, self.cfg
        base = ray.put(self.work)
        if not (self.backend.loads_model or self.backend.reads_dataset):
            task = ray.remote(_shard_task).options(num_cpus=cfg.num_cpus, max_retries=cfg.max_retries,
                                                   scheduling_strategy="SPREAD")
            return {task.remote(base, tuple(by_id[i] for i in ids), n, self.collector, os.getcwd()): n
                    for n, ids in enumerate(shards)}
        size = actor_pool_size(ray.nodes(), cfg, len(shards))
        actor = ray.remote(_ModelActor).options(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus,
                                                max_restarts=cfg.max_retries,
                                                max_task_retries=cfg.max_retries,
                                                scheduling_strategy="SPREAD")
        self.actors = [actor.remote(self.work, os.getcwd()) for _ in range(size)]
        return {self.actors[n % size].serve.remote(tuple(by_id[i] for i in ids), n, self.collector): n
                for n, ids in enumerate(shards)}

    def _finished(self, shard: int, ref: Any) -> None:
        try:
            self.results.append(self.ray.get(ref))
        except Exception as exc:  # a shard that failed past its retries: its clips are named below
            gone = _model_gone(exc)
            if gone is not None:  # the run's failure, not the shard's: stop every shard now
                raise gone from None
            offline = next((c for c in (getattr(exc, "cause", None), exc) if isinstance(c, NoNetwork)), None)
            if offline is not None:  # no server reached (agl.core.reach): the run's, as locally
                raise NoNetwork(str(offline.args[0]) if offline.args else str(offline)) from None
            text = str(exc).strip().splitlines()
            self.errors[shard] = f"{type(exc).__name__}: {text[-1] if text else ''}"[:300]

    async def _drain(self, by_id: dict[str, Request], sink: Sink, cache: ResponseCache | None) -> None:
        for sid, reply in await self.collector.take.remote():
            request = by_id[sid]
            await remember(self.backend, request, reply, cache)
            await sink.put(Answer(request, reply))

    async def _merge(self, shards: list[tuple[str, ...]], by_id: dict[str, Request], sink: Sink) -> None:
        """Every planned clip answered exactly once: a clip of a failed shard is a FAILED
        record naming the shard's error (a rerun asks it again)."""
        answered = set(self.collected.pop("answered", ()))
        for n, ids in enumerate(shards):
            if n in self.errors:
                print(f"ray: shard {n} failed after {self.cfg.max_retries} retries: {self.errors[n]}",
                      file=sys.stderr)
            why = f"ray shard {n} failed: {self.errors[n]}" if n in self.errors else f"ray shard {n} never answered it"
            for sid in ids:
                if sid not in answered:
                    await sink.put(Answer(by_id[sid], Reply(ReplyStatus.FAILED, error=why,
                                                            extra={"attempts": 0, "cached": False})))

    def facts(self) -> dict[str, Any]:
        nodes = Counter(r["node"] for r in self.results)
        return {"driver_node": self.driver_node, "shard_results": sorted(self.results, key=lambda r: r["shard"]),
                "attempts": self.collected.get("attempts", []),
                "duplicates_dropped": self.collected.get("duplicates", {}),
                "failed_shards": self.errors, "nodes": dict(nodes)}


def _model_gone(exc: BaseException) -> ModelGone | None:
    """The ModelGone a shard raised, unwrapped from Ray's RayTaskError (whose `cause` is the
    shard's own exception), so the driver stops with the same one line as a local run."""
    cause = getattr(exc, "cause", None)
    for candidate in (cause, exc):
        if isinstance(candidate, ModelGone):
            return ModelGone(str(candidate.args[0]) if candidate.args else str(candidate),
                             model=candidate.model, provider_message=candidate.provider_message)
    return None


def _absolute(request: Request) -> Request:
    """Audio paths a worker on another node can open: absolute (a shared filesystem's)."""
    if request.audio_path is None:
        return request
    return replace(request, audio_path=Path(request.audio_path).resolve())


def _portable(work: Work) -> Work:
    """`work` without its requests (sent per shard) and with an absolute audio root."""
    root = Path(work.audio_root).resolve() if work.audio_root is not None else None
    return replace(work, requests=(), audio_root=root)
