"""The seam between the run driver and what answers its requests: executors.

The driver (`agl.inference.model_run`) plans a run (which clips are pending, their requests),
writes every record and the summary. It hands the pending requests to one executor, which
answers them and does nothing else: each answer goes back through `Sink.put` as it arrives.

* `local` (`agl.inference.executors.local`): the async runner in this process
  (`agl.inference.runner`: concurrency, timeout, retries, the response cache).
* `batch` (`agl.inference.executors.batch`): the provider's batch API (`agl.inference.batch`),
  the clips it cannot take going through `local`.
* `ray` (`agl.inference.executors.ray_cluster`): shards on a Ray cluster, replies streamed
  back to this process (params.yaml `executor:`, `agl.inference.transport`).

An executor is one module here that registers itself with `@register_executor("<name>")`;
`get_executor(name)` imports them on first use, as `agl.backends.get_backend` does.

Designed for an executor out of this process (a cluster): `Work` (`agl.inference.work`) is
plain, picklable data
(the requests, the model entry, the run options, the manifest's clips for
`Backend.prepare`, the run folder's path); an executor that runs elsewhere builds its own backend from
`work.spec` and hands each answer back to the driver's sink as results return. It never
needs the driver's open files: the records are the driver's to write.
"""

from __future__ import annotations

import abc
import difflib
import importlib
import pkgutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agl.backends.base import Backend
from agl.errors import AglError
from agl.inference.batch.options import is_batch
from agl.inference.batch.state import refuse_while_live
from agl.inference.work import Sink, Work


class Executor(abc.ABC):
    """Answers a run's pending requests. Subclasses are registered with @register_executor."""

    name: ClassVar[str] = ""

    def check(self, out_dir: Path) -> None:
        """Refuse to start where this executor cannot run: by default while batch jobs of
        the run are live (their clips would be paid twice)."""
        refuse_while_live(out_dir)

    @abc.abstractmethod
    async def answer(self, work: Work, backend: Backend, sink: Sink) -> Any:
        """Answer `work.requests` through `sink`. `backend`: the driver's, built from
        `work.spec` and prepared with `work.clips` (one out of process builds its own).
        Returns what `summarize` reads (or None)."""

    def summarize(self, summary: dict[str, Any], chosen: Sequence[Any], settings: dict[str, Any],
                  out_dir: Path, report: Any) -> dict[str, Any]:
        """The summary with this executor's own section (`chosen`: the run's records;
        `report`: what `answer` returned, None when nothing was pending); default: none."""
        return summary


_REGISTRY: dict[str, type[Executor]] = {}


def register_executor(name: str):
    """Class decorator: make an executor available under `name`. Duplicate names are refused."""

    def deco(cls: type[Executor]) -> type[Executor]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"executor name '{name}' is already registered by {_REGISTRY[name]}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def available_executors() -> list[str]:
    """The names of the registered executors."""
    _load_all()
    return sorted(_REGISTRY)


def get_executor(name: str) -> Executor:
    """A new executor registered under `name`, or an AglError that suggests names."""
    if name not in _REGISTRY:
        _load_all()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise AglError(f"unknown executor '{name}'; {hint}known executors: "
                       f"{', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]()


def executor_for(settings: dict[str, Any] | None, kind: str = "local") -> Executor:
    """The executor a model entry asks for: `batch` for `settings.mode: batch` (the provider
    does the work: no cluster needed), else `kind` (params.yaml `executor.kind`)."""
    return get_executor("batch" if is_batch(settings) else kind)
