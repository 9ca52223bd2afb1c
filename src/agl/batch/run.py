"""One batch pass over a run: resolve, poll, collect, route, probe, submit. Safe to kill.

The order makes every kill recoverable with nothing lost and nothing paid twice:

1. A job record with no provider id (the process died while creating it) is looked up by
   its tag: adopted if the provider has it, dropped (its clips back in the queue) if not.
2. Each live job is polled once. A finished one (completed, expired, cancelled, failed) is
   collected: its answers are cached and appended to predictions.jsonl (fsync'd) first,
   then the job leaves the state file; a clip without an answer gets its reason in
   `fallback`. A kill in between collects the job again; recorded clips are skipped.
   A job unfinished after `max_age_h` is cancelled (collected on a later pass).
3. The run's other unfinished clips are routed: a clip held by a live job waits for it;
   one with a fallback reason goes synchronous (or into a new job, `fallback: batch`);
   one the cache answers, or whose audio does not decode, goes to the synchronous path
   (which answers it from the cache, or records the failure, without a request).
4. With `probe: true`, the first job holds two clips; the rest wait until it answered
   (accepted) or not (rejected: one line, and every clip runs synchronously).
5. The rest are written as request lines and split by the provider's count and size
   limits; each job's record (tag, clips) is saved before the job is created.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend, BackendError, Reply, Request
from agl.batch import state as state_mod
from agl.batch.options import BatchOptions
from agl.batch.provider import BatchProvider, Chunk, JobStatus, SubmitError, provider_class
from agl.batch.state import BatchState, Job
from agl.core.secrets import known_secrets, scrub

# A job record without a provider id younger than this is not given up when the provider's
# list does not show it yet (a list may lag a create): its clips stay held for a later pass.
FIND_GRACE_S = 600.0
_LOST = {"completed": "the batch job finished without a result for this clip",
         "expired": "the batch job expired before answering this clip",
         "cancelled": "the batch job was cancelled before answering this clip"}


@dataclass
class PassContext:
    backend: Backend  # the run's backend: names the records, holds the settings
    out_dir: Path
    pred_path: Path
    cache: Any  # agl.inference.cache.ResponseCache | None
    prompt: Any
    fingerprint: str
    price_in: float
    price_out: float
    options: BatchOptions
    timeout_s: float
    concurrency: int


@dataclass
class PassReport:
    sync_now: list[Request] = field(default_factory=list)  # for the synchronous path now
    reasons: dict[str, str] = field(default_factory=dict)  # sample id -> why synchronous
    collected: int = 0
    submitted_jobs: int = 0
    submitted_clips: int = 0
    in_flight_jobs: int = 0
    in_flight_clips: int = 0
    waiting: int = 0  # neither answered, submitted nor synchronous: the next pass takes them
    messages: list[str] = field(default_factory=list)


def run_pass(ctx: PassContext, requests: list[Request]) -> PassReport:
    """One pass for `requests` (the run's unfinished clips); see the module docstring."""
    return asyncio.run(_pass(ctx, requests))


def new_state(ctx: PassContext) -> BatchState:
    return BatchState(backend=ctx.backend.name, model=ctx.backend.model,
                      fingerprint=ctx.fingerprint)


async def _pass(ctx: PassContext, requests: list[Request]) -> PassReport:
    state = state_mod.load(ctx.out_dir) or new_state(ctx)
    if (state.backend, state.model) != (ctx.backend.name, ctx.backend.model):
        state.probe, state.rejected = None, None  # another model: its own probe
        state.backend, state.model = ctx.backend.name, ctx.backend.model
    state.fingerprint = ctx.fingerprint
    fresh = type(ctx.backend)(ctx.backend.model, **ctx.backend.settings)  # this loop's client
    prov = provider_class(ctx.backend.name)(fresh, ctx.options, state, timeout_s=ctx.timeout_s,
                                            concurrency=ctx.concurrency)
    report = PassReport()

    def save() -> None:
        state_mod.save(ctx.out_dir, state)

    try:
        finished = _finished(ctx.pred_path)
        for sid in [s for s in state.fallback if s in finished]:
            del state.fallback[sid]
        for sid in [s for s in state.attempts if s in finished]:
            del state.attempts[sid]
        await _resolve_unconfirmed(prov, state, report, save)
        answered = await _collect(ctx, prov, state, finished, report, save)
        for sid in answered:
            state.fallback.pop(sid, None)
            state.attempts.pop(sid, None)
        todo = [r for r in requests if r.sample_id not in answered | finished]
        await _route(ctx, prov, state, todo, report, save)
    finally:
        save()
        await prov.aclose()
    mine = [j for j in state.jobs if j.fingerprint == ctx.fingerprint]
    report.in_flight_jobs = len(mine)
    report.in_flight_clips = sum(len(j.clips) for j in mine)
    return report


def _finished(pred_path: Path) -> set[str]:
    from agl.predictions.records import iter_records

    if not pred_path.exists():
        return set()
    return {p.sample_id for p in iter_records(pred_path) if p.finished}


async def _resolve_unconfirmed(prov: BatchProvider, state: BatchState, report: PassReport,
                               save) -> None:
    for job in [j for j in state.jobs if j.job_id is None]:
        try:
            found = await prov.find(job)
        except Exception as exc:  # noqa: BLE001 - its clips stay held; the next pass asks again
            report.messages.append(f"could not look up job {job.tag} ({_short(exc)}); its "
                                   f"{len(job.clips)} clip(s) stay held; rerun later")
            continue
        if found:
            job.job_id = found
            report.messages.append(f"job {found} (created when the last run stopped) found "
                                   "and resumed")
        elif time.time() - job.created < FIND_GRACE_S:
            report.messages.append(f"job {job.tag} is not listed by the provider yet; its "
                                   f"{len(job.clips)} clip(s) stay held; rerun in a few minutes")
            continue
        else:
            state.jobs.remove(job)
            for sid in job.clips:
                state.attempts[sid] = max(0, state.attempts.get(sid, 1) - 1)
            if job.probe:
                state.probe = None
            report.messages.append(f"job {job.tag} was never created; its {len(job.clips)} "
                                   "clip(s) go back to the queue")
            await _quiet(prov.cleanup(job, None))
        save()


async def _collect(ctx: PassContext, prov: BatchProvider, state: BatchState,
                   finished: set[str], report: PassReport, save) -> set[str]:
    """Poll every live job once; record what the finished ones answered."""
    from agl.predictions.records import PredictionWriter

    answered: set[str] = set()
    now = time.time()
    with PredictionWriter(ctx.pred_path) as writer:
        for job in [j for j in state.jobs if j.job_id is not None]:
            try:
                st = await prov.status(job)
            except Exception as exc:  # noqa: BLE001 - polled again next pass
                report.messages.append(f"could not poll job {job.job_id} ({_short(exc)}); "
                                       "rerun later")
                continue
            job.provider_state, job.last_poll = st.state, now
            job.expires_at = st.expires_at or job.expires_at
            if st.outcome is None:
                if (now - job.created > ctx.options.max_age_h * 3600
                        and not job.cancel_requested):
                    try:
                        await prov.cancel(job)
                        job.cancel_requested = True
                        report.messages.append(
                            f"job {job.job_id} unfinished after {ctx.options.max_age_h:g} h: "
                            "cancelled; a later run collects it and falls back")
                    except Exception as exc:  # noqa: BLE001
                        report.messages.append(f"could not cancel job {job.job_id} "
                                               f"({_short(exc)})")
                continue
            try:
                results = await prov.results(job, st)
            except Exception as exc:  # noqa: BLE001 - the job stays; the next pass retries
                report.messages.append(f"could not read the results of job {job.job_id} "
                                       f"({_short(exc)}); rerun later")
                continue
            preds = _job_records(ctx, state, job, st, results, finished | answered)
            writer.write_many(preds)  # durable before the job leaves the state file
            answered |= {p.sample_id for p in preds}
            report.collected += len(preds)
            _after_job(state, job, st, results, report, ctx.backend.settings)
            state.jobs.remove(job)
            save()
            await _quiet(prov.cleanup(job, st))
            save()
    return answered


def _job_records(ctx: PassContext, state: BatchState, job: Job, st: JobStatus,
                 results: dict[str, Reply | str], done: set[str]) -> list[Any]:
    from agl.inference.runner import _prediction, _scrub_reply

    secrets = known_secrets(ctx.backend.settings)
    mine = job.fingerprint == ctx.fingerprint
    factor = ctx.options.price_factor
    preds = []
    for sid, info in job.clips.items():
        res = results.get(sid)
        if isinstance(res, Reply):
            reply = _scrub_reply(res, secrets)
            if (ctx.cache is not None and info.get("key") and ctx.backend.deterministic):
                # The entry a synchronous call would have left (its reply, one attempt).
                ctx.cache.put(info["key"], replace(reply, extra={
                    **reply.extra, "attempts": 1, "cached": False}))
            if not mine or sid in done:
                continue  # another prompt's job (cached only), or recorded by a killed pass
            reply = replace(reply, extra={**reply.extra, "attempts": 1, "cached": False,
                                          "answered_by": "batch", "batch_job": job.job_id})
            preds.append(_prediction(sid, reply, ctx.backend, ctx.prompt, ctx.fingerprint,
                                     ctx.price_in * factor, ctx.price_out * factor, secrets))
        elif mine and sid not in done:
            if isinstance(res, str):
                reason = f"batch request failed: {res}"
            elif st.outcome == "failed":
                reason = f"the batch job failed: {st.error or st.state}"
            else:
                reason = _LOST[st.outcome]
            state.fallback[sid] = scrub(reason[:500], secrets)
    return preds


def _after_job(state: BatchState, job: Job, st: JobStatus, results: dict[str, Reply | str],
               report: PassReport, prov_settings: dict[str, Any]) -> None:
    """The probe's verdict, a job refused as a whole, and the job's line in the history."""
    n_ok = sum(1 for sid in job.clips if isinstance(results.get(sid), Reply))
    errors = [r for sid, r in results.items() if sid in job.clips and isinstance(r, str)]
    why = st.error or (errors[0] if errors else None) or f"job ended {st.state}"
    why = scrub(why[:500], known_secrets(prov_settings))
    if job.probe:
        if n_ok:
            state.probe = {"status": "accepted", "job": job.job_id}
            report.messages.append(f"probe job {job.job_id} answered: the provider takes "
                                   "this model with audio in batch")
        else:
            state.probe = {"status": "rejected", "job": job.job_id, "reason": why}
            state.rejected = f"the probe job got no answer ({why})"
    elif st.outcome == "failed" and not n_ok and state.rejected is None:
        state.rejected = f"job {job.job_id} failed as a whole ({why})"
    state.history.append({"tag": job.tag, "job_id": job.job_id, "state": st.state,
                          "clips": len(job.clips), "answered": n_ok,
                          "created": job.created, "finished": time.time(),
                          "probe": job.probe})
    report.messages.append(f"job {job.job_id} {st.state}: {n_ok} of {len(job.clips)} "
                           "clip(s) answered")


async def _route(ctx: PassContext, prov: BatchProvider, state: BatchState,
                 todo: list[Request], report: PassReport, save) -> None:
    held = {sid for j in state.jobs if j.fingerprint == ctx.fingerprint for sid in j.clips}
    opts = ctx.options
    batchable = []
    for r in todo:
        sid = r.sample_id
        if sid in held:
            continue
        if state.rejected is not None:
            _to_sync(report, r, f"batch not accepted for this model: {state.rejected}")
        elif sid in state.fallback and (opts.fallback == "sync"
                                        or state.attempts.get(sid, 0) >= opts.max_attempts):
            _to_sync(report, r, state.fallback[sid])
        else:
            batchable.append(r)
    if state.rejected is not None and any(r.sample_id not in held for r in todo):
        report.messages.append(f"{ctx.backend.name}:{ctx.backend.model}: "
                               f"{state.rejected}; running synchronously")
    batchable = await _screen(ctx, batchable, report)
    if not batchable:
        return
    running = state.probe is not None and state.probe.get("status") == "running"
    if opts.probe and (state.probe is None or running):
        if running:
            report.waiting += len(batchable)
            return
        probe, rest = batchable[:2], batchable[2:]
        await _submit(ctx, prov, state, probe, report, save, probe=True)
        if state.rejected is not None:
            for r in rest:
                _to_sync(report, r, f"batch not accepted for this model: {state.rejected}")
        else:
            report.waiting += len(rest)
            if rest:
                report.messages.append(f"{len(rest)} clip(s) wait for the probe job's answer")
        return
    await _submit(ctx, prov, state, batchable, report, save, probe=False)


def _to_sync(report: PassReport, request: Request, reason: str | None) -> None:
    report.sync_now.append(request)
    if reason:
        report.reasons[request.sample_id] = reason


async def _screen(ctx: PassContext, requests: list[Request], report: PassReport) -> list[Request]:
    """Hash the audio (the cache key); a cache hit, unreadable or undecodable audio goes to
    the synchronous path, which answers from the cache or records the failure unrequested."""
    from agl.core.audio import probe
    from agl.inference.cache import cache_key
    from agl.inference.runner import PROBE_SECONDS, _hash_audio

    keep = []
    for r in requests:
        try:
            r = await asyncio.to_thread(_hash_audio, r)
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


async def _submit(ctx: PassContext, prov: BatchProvider, state: BatchState,
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
            _to_sync(report, r, f"not accepted for batch: {refused[r.sample_id]}")
        else:
            queue.append(r)
    with tempfile.TemporaryDirectory(prefix="agl-batch-") as tmp:
        chunk, fh, members = None, None, {}
        for i, r in enumerate(queue):
            try:
                line = await prov.line(r)
            except BackendError:
                _to_sync(report, r, None)  # the synchronous path records the same error
                continue
            if len(line) + 1 > max_bytes:
                _to_sync(report, r, f"its request ({len(line) + 1:,} bytes) exceeds the batch "
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
                fh, members = open(chunk.path, "wb"), {}
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
            _to_sync(report, r, f"batch not accepted for this model: {state.rejected}")
        else:
            report.waiting += 1


async def _send(ctx: PassContext, prov: BatchProvider, state: BatchState, chunk: Chunk,
                members: dict[str, Request], report: PassReport, save, probe: bool) -> bool:
    from agl.inference.cache import cache_key

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
        await _quiet(prov.cleanup(job, None))
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


async def _quiet(coro) -> None:
    try:
        await coro
    except Exception:  # noqa: BLE001 - clean-up is best effort
        pass


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"
