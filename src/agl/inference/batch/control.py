"""`--batch-status` and `--batch-cancel`: a run's batch jobs, seen and stopped.

Status polls each live job (nothing is collected or submitted) and prints one line per job:
its provider id, state, clips, the provider's request counts where it gives them, age and
time to expiry; then the probe's verdict, clips waiting for a fallback, and the finished
jobs. Cancel asks the provider to cancel every live job and marks it so; nothing is lost:
the next run (the same command) collects what each job finished before it stopped (those
requests are paid for) and sends the rest by the fallback (synchronous by default).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from agl.backends.base import get_backend
from agl.core.single_writer import exclusive
from agl.inference.batch import state as state_mod
from agl.inference.batch.options import batch_options
from agl.inference.batch.providers import provider_class
from agl.inference.batch.state import BatchState


def _provider(backend_name: str, model: str, settings: dict[str, Any], state: BatchState,
              timeout_s: float):

    options = batch_options(backend_name, {**settings, "mode": "batch"})
    backend = get_backend(backend_name)(model, **settings)
    return provider_class(backend_name)(backend, options, state, timeout_s=timeout_s,
                                        concurrency=1)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    d, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m = rem // 60
    return (f"{d}d{h:02d}h" if d else f"{h}h{m:02d}m") if seconds >= 3600 else f"{m}m"


def status_lines(backend_name: str, model: str, settings: dict[str, Any], out_dir: str | Path,
                 *, timeout_s: float = 60.0) -> list[str]:
    """Each live batch job of this run folder: its state, clip counts and age (`agl infer --batch-
    status`)."""
    path = state_mod.state_path(out_dir)
    state = state_mod.load(out_dir)
    if state is None:
        return [f"{path}: no batch jobs (this run folder has not used batch mode)"]
    lines = [f"{path}: {state.backend}:{state.model}, {len(state.jobs)} live job(s)"]
    now = time.time()

    async def go() -> None:
        prov = _provider(backend_name, model, settings, state, timeout_s)
        try:
            for job in state.jobs:
                head = f"  {job.job_id or job.tag}{' (probe)' if job.probe else ''}"
                if job.job_id is None:
                    lines.append(f"{head}: being created when a run stopped; the next run looks "
                                 f"it up; {len(job.clips)} clip(s), age {_age(now - job.created)}")
                    continue
                try:
                    st = await prov.status(job)
                    word, counts = st.state, st.counts
                    expires = st.expires_at or job.expires_at
                except Exception as exc:  # noqa: BLE001 - shown, not raised
                    word, counts = f"not polled ({type(exc).__name__}: {str(exc)[:120]})", {}
                    expires = job.expires_at
                text = f"{head}: {word}, {len(job.clips)} clip(s)"
                if counts:
                    text += " (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")"
                text += f", age {_age(now - job.created)}"
                if expires:
                    text += (f", expires in {_age(expires - now)}" if expires > now
                             else ", past its expiry")
                if job.cancel_requested:
                    text += ", cancel requested"
                lines.append(text)
        finally:
            await prov.aclose()

    asyncio.run(go())
    if state.probe:
        lines.append(f"  probe: {state.probe.get('status')}"
                     + (f" ({state.probe['reason']})" if state.probe.get("reason") else ""))
    if state.rejected:
        lines.append(f"  batch refused for this model: {state.rejected}; clips run "
                     "synchronously (delete the state file when no job is live to try again)")
    if state.fallback:
        lines.append(f"  {len(state.fallback)} clip(s) answered by no batch job wait for the "
                     "fallback (the next run)")
    if state.history:
        done = sum(h["answered"] for h in state.history)
        lines.append(f"  {len(state.history)} finished job(s), {done} clip(s) answered by them")
    return lines


def cancel_lines(backend_name: str, model: str, settings: dict[str, Any], out_dir: str | Path,
                 *, timeout_s: float = 60.0) -> list[str]:
    """Cancel this run folder's live batch jobs (`agl infer --batch-cancel`); one line per job
    saying what happened."""

    with exclusive(out_dir, "this run's batch jobs"):
        state = state_mod.load(out_dir)
        if state is None or not state.jobs:
            return [f"{state_mod.state_path(out_dir)}: no live batch job to cancel"]
        lines: list[str] = []

        async def go() -> None:
            prov = _provider(backend_name, model, settings, state, timeout_s)
            try:
                for job in state.jobs:
                    if job.job_id is None:
                        try:
                            job.job_id = await prov.find(job)
                        except Exception:  # noqa: BLE001 - looked up again by the next run
                            pass
                        if job.job_id is None:
                            lines.append(f"  {job.tag}: not created yet as far as the provider "
                                         "lists; the next run resolves it")
                            continue
                    try:
                        await prov.cancel(job)
                        job.cancel_requested = True
                        lines.append(f"  {job.job_id}: cancel requested ({len(job.clips)} "
                                     "clip(s))")
                    except Exception as exc:  # noqa: BLE001 - e.g. it finished meanwhile
                        lines.append(f"  {job.job_id}: not cancelled ({type(exc).__name__}: "
                                     f"{str(exc)[:160]}); the next run collects it")
                    state_mod.save(out_dir, state)
            finally:
                await prov.aclose()

        asyncio.run(go())
        lines.append("the next run (the same command, without --batch-cancel) records what "
                     "the jobs answered before they stopped and sends the rest by the fallback "
                     "(synchronous by default)")
        return lines
