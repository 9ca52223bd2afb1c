"""The seam between the run driver and what answers its requests: executors.

The driver (`agl.inference.model_run`) plans a run (which clips are pending, their requests),
writes every record and the summary. It hands the pending requests to one executor, which
answers them and does nothing else: each answer goes back through `Sink.put` as it arrives.

* `local` (`agl.inference.executors.local`): the async runner in this process
  (`agl.inference.runner`: concurrency, timeout, retries, the response cache).
* `batch` (`agl.inference.executors.batch`): the provider's batch API (`agl.inference.batch`),
  the clips it cannot take going through `local`.
* `ray` (`agl.inference.executors.ray_cluster`): shards on a Ray cluster, replies streamed
  back to this process (params.yaml `executor:`, `agl.executor.config`).

An executor is one module here, with an entry in the index at the end of this file: a small
factory that imports its module when the name is first asked for (`get_executor(name)`), as
`agl.backends` indexes backends.

Designed for an executor out of this process (a cluster): `Work` (`agl.inference.work`) is
plain, picklable data
(the requests, the model entry, the run options, the manifest's clips for
`Backend.prepare`, the run folder's path); an executor that runs elsewhere builds its own backend from
`work.spec` and hands each answer back to the driver's sink as results return. It never
needs the driver's open files: the records are the driver's to write.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agl.backends.base import Backend
from agl.core.registry import Registry
from agl.inference.batch.options import is_batch
from agl.inference.batch.state import refuse_while_live
from agl.inference.work import Sink, Work


class Executor(abc.ABC):
    """Answers a run's pending requests. Subclasses set `name`, their entry in the index."""

    name: ClassVar[str] = ""
    # Whether this executor sends each request itself, in this process, through the runner:
    # only such an executor cuts a long clip into windows and holds a spend cap before each
    # request (a batch job is submitted whole and priced by the provider; Ray shards spend
    # apart, with no shared purse).
    local: ClassVar[bool] = False
    # How to run the model on the local executor instead (the end of a refusal's line).
    instead: ClassVar[str] = "with executor.kind: local"
    # Whether a kept record may be served again from the reply cache on a rerun (the driver's
    # rederivation): not where the record says how it was answered and priced.
    rederives: ClassVar[bool] = True

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

    def summary_text(self, summary: dict[str, Any]) -> str:
        """This executor's part of the run's one line, from the section `summarize` added
        (agl.inference.params_run.summary_line); default: none."""
        return ""


_EXECUTORS: Registry[type[Executor]] = Registry("executor")


def available_executors() -> list[str]:
    """The names of the registered executors."""
    return _EXECUTORS.names()


def get_executor(name: str) -> Executor:
    """A new executor registered under `name`, or an AglError that suggests names."""
    return _EXECUTORS.get(name)()


def summary_text(summary: dict[str, Any]) -> str:
    """The part of a run's line that its executor adds (the batch jobs, their price), for the
    executor its recorded settings chose (`mode: batch`; every other one adds nothing)."""
    return executor_for(summary.get("settings")).summary_text(summary)


def executor_for(settings: dict[str, Any] | None, kind: str = "local") -> Executor:
    """The executor a model entry asks for: `batch` for `settings.mode: batch` (the provider
    does the work: no cluster needed), else `kind` (params.yaml `executor.kind`)."""
    return get_executor("batch" if is_batch(settings) else kind)


# --- the index ---------------------------------------------------------------------------


@_EXECUTORS.lazy("local")
def _local() -> type[Executor]:
    from agl.inference.executors.local import LocalExecutor

    return LocalExecutor


@_EXECUTORS.lazy("batch")
def _batch() -> type[Executor]:
    from agl.inference.executors.batch import BatchExecutor

    return BatchExecutor


@_EXECUTORS.lazy("ray")
def _ray() -> type[Executor]:
    # The module, not Ray: it imports ray only when a run starts (naming `ray` in params.yaml
    # and checking it must work where Ray is not installed).
    from agl.inference.executors.ray_cluster import RayExecutor

    return RayExecutor
