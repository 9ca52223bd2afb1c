"""Submitting: screen the clips, write request files within the provider's limits, create
one job per file. A job's record is saved before the job is created (see agl.inference.batch.run)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from agl.backends.base import BackendError
from agl.contracts.calls import Request
from agl.core.audio import probe
from agl.core.nofollow import open_part
from agl.core.secrets import known_secrets, scrub
from agl.inference.batch import state as state_mod
from agl.inference.batch.context import PassContext, PassReport, quiet, to_sync
from agl.inference.batch.provider import BatchProvider, Chunk, SubmitError
from agl.inference.batch.state import BatchState, Job
from agl.inference.cache import cache_key
from agl.inference.runner import PROBE_SECONDS, hash_audio


async def screen(ctx: PassContext, requests: list[Request], report: PassReport) -> list[Request]:
    """Hash the audio (the cache key); a cache hit, unreadable or undecodable audio goes to
    the synchronous path, which answers from the cache or records the failure unrequested."""

    keep = []
    for r in requests:
        try:
            r = await asyncio.to_thread(hash_audio, r)
        except OSError:
            report.sync_now.append(r)
            continue
        if ctx.cache is not None and ctx.backend.deterministic:
            key = cache_key(ctx.backend.name, ctx.backend.model, ctx.backend.settings, r)
            if ctx.cache.get(key) is not None:
                report.sync_now.append(r)
                continue
        if r.audio_path is not None:
            got = await asyncio.to_thread(probe, r.audio_path, PROBE_SECONDS)
            if not got.ok:
                report.sync_now.append(r)
                continue
        keep.append(r)
    return keep


async def submit(ctx: PassContext, prov: BatchProvider, state: BatchState,
                  requests: list[Request], report: PassReport, save, *, probe: bool) -> None:
    """Write the requests into request files within the provider's limits; one job each."""
    max_requests, max_bytes = ctx.options.limits(ctx.backend.name)
    try:
        refused = await prov.prepare(requests, save)
    except SubmitError as exc:
        report.waiting += len(requests)
        report.messages.append(f"could not upload the audio ({exc}); rerun to retry")
        return
    queue = []
    for r in requests:
        if r.sample_id in refused:
            to_sync(report, r, f"not accepted for batch: {refused[r.sample_id]}")
        else:
            queue.append(r)
    with tempfile.TemporaryDirectory(prefix="agl-batch-") as tmp:
        chunk, fh, members = None, None, {}
        for i, r in enumerate(queue):
            try:
                line = await prov.line(r)
            except BackendError:
                to_sync(report, r, None)  # the synchronous path records the same error
                continue
            if len(line) + 1 > max_bytes:
                to_sync(report, r, f"its request ({len(line) + 1:,} bytes) exceeds the batch "
                                    f"file limit ({max_bytes:,} bytes)")
                continue
            if chunk is not None and (len(chunk.sample_ids) >= max_requests
                                      or chunk.nbytes + len(line) + 1 > max_bytes):
                fh.close()
                if not await _send(ctx, prov, state, chunk, members, report, save, probe):
                    _unsent(state, queue[i:], report)
                    return
                chunk = None
            if chunk is None:
                chunk = Chunk(Path(tmp) / f"requests-{report.submitted_jobs + 1}.jsonl")
                fh, members = open_part(chunk.path), {}  # no-follow, even in its own folder
            fh.write(line + b"\n")
            chunk.sample_ids.append(r.sample_id)
            chunk.nbytes += len(line) + 1
            members[r.sample_id] = r
        if chunk is not None:
            fh.close()
            await _send(ctx, prov, state, chunk, members, report, save, probe)


def _unsent(state: BatchState, requests: list[Request], report: PassReport) -> None:
    """Requests not submitted after a job could not be: synchronous if batch is refused for
    this model, else they wait for the next pass."""
    for r in requests:
        if state.rejected is not None:
            to_sync(report, r, f"batch not accepted for this model: {state.rejected}")
        else:
            report.waiting += 1


async def _send(ctx: PassContext, prov: BatchProvider, state: BatchState, chunk: Chunk,
                members: dict[str, Request], report: PassReport, save, probe: bool) -> bool:

    b = ctx.backend
    tag = state_mod.new_tag()
    try:
        ref = await prov.upload_input(chunk)
    except SubmitError as exc:
        _refused(ctx, state, exc, list(members.values()), report)
        return False
    keyed = ctx.cache is not None and b.deterministic
    job = Job(tag=tag, provider=prov.name, created=time.time(), input_ref=ref, probe=probe,
              fingerprint=ctx.fingerprint,
              clips={sid: {"key": cache_key(b.name, b.model, b.settings, r) if keyed else None,
                           "audio_sha256": r.audio_sha256} for sid, r in members.items()})
    state.jobs.append(job)
    for sid in members:
        state.attempts[sid] = state.attempts.get(sid, 0) + 1
    if probe:
        state.probe = {"status": "running"}
    save()  # the record exists before the job: a kill from here on is resolved by its tag
    try:
        created = await prov.create(chunk, ref, tag)
    except SubmitError as exc:
        if exc.ambiguous:
            report.messages.append(f"job {tag}: creation uncertain ({exc}); its "
                                   f"{len(members)} clip(s) stay held and the next run looks "
                                   "it up")
            return False
        state.jobs.remove(job)
        for sid in members:
            state.attempts[sid] -= 1
        if probe:
            state.probe = None
        save()
        await quiet(prov.cleanup(job, None))
        _refused(ctx, state, exc, list(members.values()), report)
        return False
    job.job_id, job.expires_at = created.job_id, created.expires_at
    save()
    report.submitted_jobs += 1
    report.submitted_clips += len(members)
    report.messages.append(f"{'probe ' if probe else ''}job {created.job_id} submitted with "
                           f"{len(members)} clip(s)")
    return True


def _refused(ctx: PassContext, state: BatchState, exc: SubmitError, requests: list[Request],
             report: PassReport) -> None:
    if exc.rejected:
        why = scrub(str(exc)[:500], known_secrets(ctx.backend.settings))
        state.rejected = f"the provider refused the batch job ({why})"
        if state.probe is not None or ctx.options.probe:
            state.probe = {"status": "rejected", "reason": state.rejected}
        report.messages.append(f"{ctx.backend.name}:{ctx.backend.model}: {state.rejected}; "
                               "running synchronously")
    else:
        report.messages.append(f"could not submit a job ({exc}); rerun to retry")
    _unsent(state, requests, report)
