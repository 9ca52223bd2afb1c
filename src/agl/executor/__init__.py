"""Where work runs: this host or a Ray cluster (params.yaml `executor:`), for the curation
stages' per-clip work.

`filter`, `tag`, `birds`, `speech` and `perturb@*` each measure (or rewrite) every clip on its
own: a clip's result depends on that clip and the stage's settings, never on another clip or
on which process computed it. Each stage describes that work as a `ClipTask` (plain,
picklable data: its config; `setup` loads what a worker needs once, e.g. Whisper, BirdNET or
an AudioSet checkpoint; `run` does one clip) and hands it to `map_clips`, which returns the
results in the order of the items whatever ran them, so the stage writes the same bytes:

* `local` (`agl.executor.local`): this host; `jobs` 1 runs in this process, more is a pool
  of `jobs` spawned processes, each loading the task's model once.
* `ray` (`agl.executor.ray_map`): the clips in interleaved shards
  (`agl.executor.shards.plan_shards`) served by a pool of Ray actors, each loading the model
  once; an actor whose node died restarts elsewhere and its shards run again
  (`executor.ray.max_retries`).

Like inference's executors (`agl.inference.executors`), a map executor is one module here,
listed in this package's index below (a factory that imports the module on the first ask:
a local run never imports the Ray module); `get_clip_executor(name)` finds it. The section
is transport: read outside DVC's params (`agl.executor.config.read_transport`), so moving
curation to a cluster re-runs no stage.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from agl.core.registry import Registry
from agl.errors import AglError
from agl.executor.config import ExecutorConfig, RayConfig

Item = tuple  # (clip id, ...): the first element names the clip, unique within one call


class ClipTask(abc.ABC):
    """One stage's per-clip work. A subclass is a frozen dataclass defined at a module's top
    level (so a spawned process or a Ray worker can unpickle it) holding only settings."""

    def setup(self) -> Any:
        """What a worker loads once and keeps for every clip it runs (a model); default none."""
        return None

    @abc.abstractmethod
    def run(self, state: Any, item: Item) -> Any:
        """One clip's result (picklable). `state`: what `setup` returned in this worker.
        A clip that cannot be read is a result with its status, never an exception: an
        exception stops the stage (locally and on Ray alike)."""


class ClipExecutor(abc.ABC):
    """Runs a `ClipTask` over items. Subclasses set `name`, their entry in the index."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def map(self, task: ClipTask, items: Sequence[Item], *, jobs: int, ray: RayConfig,
            progress: Callable[[int], None] | None) -> list[Any]:
        """`task.run` over every item, results in the items' order. `progress(n)`: n more
        clips done (for a progress bar), or None."""

    def facts(self) -> dict[str, Any]:
        """Where the last `map` ran (nodes, shards): for a stage's timings file, never an output."""
        return {}


_CLIP_EXECUTORS: Registry[type[ClipExecutor]] = Registry("clip executor")


def get_clip_executor(name: str) -> ClipExecutor:
    """A new map executor registered under `name`, or an AglError that suggests names."""
    return _CLIP_EXECUTORS.get(name)()


def map_clips(task: ClipTask, items: Sequence[Item], *, jobs: int = 1,
              transport: ExecutorConfig | None = None, progress: str | None = None,
              facts: dict[str, Any] | None = None) -> list[Any]:
    """`task` over `items` where `transport` says (None: this host), results in the items'
    order. `jobs`: processes on this host (the stage's own `jobs` param; Ray ignores it: the
    cluster's actors are `executor.ray.actors`). `progress`: a label for a progress bar on a
    terminal. `facts`: filled with where the work ran (for the stage's timings file)."""
    items = list(items)
    keys = [it[0] for it in items]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise AglError(f"clip {dup!r} is listed twice: one result per clip (check the manifest's keys)")
    if not items:
        return []
    cfg = transport or ExecutorConfig()
    executor = get_clip_executor(cfg.kind)
    with _bar(progress, len(items)) as bar:
        out = executor.map(task, items, jobs=max(1, int(jobs)), ray=cfg.ray, progress=bar)
    if facts is not None:
        facts.update({"executor": cfg.kind, **executor.facts()})
    return out


class _bar:
    """A tqdm bar on stderr when `label` is given and stderr is a terminal, else nothing."""

    def __init__(self, label: str | None, total: int):
        self.label, self.total, self.tqdm = label, total, None

    def __enter__(self) -> Callable[[int], None] | None:
        import sys

        if not self.label or not sys.stderr.isatty():
            return None
        from tqdm import tqdm  # a progress bar only where a terminal watches

        self.tqdm = tqdm(total=self.total, desc=self.label, unit="clip")
        return self.tqdm.update

    def __exit__(self, *exc: Any) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


# --- the index ---------------------------------------------------------------------------


@_CLIP_EXECUTORS.lazy("local")
def _local() -> type[ClipExecutor]:
    from agl.executor.local import LocalMap  # the index: imported on the first ask

    return LocalMap


@_CLIP_EXECUTORS.lazy("ray")
def _ray() -> type[ClipExecutor]:
    from agl.executor.ray_map import RayMap  # the index: a local run never imports it

    return RayMap
