"""One batch pass over a run: resolve, poll, collect, route, probe, submit. Safe to kill.

The order makes every kill recoverable with nothing lost and nothing paid twice:

1. A job record with no provider id (the process died while creating it) is looked up by
   its tag: adopted if the provider has it, dropped (its clips back in the queue) if not.
2. Each live job is polled once. A finished one (completed, expired, cancelled, failed) is
   collected: its answers are cached and handed to the driver's sink, which makes them
   durable records (predictions.jsonl, fsync'd) first; then the job leaves the state file;
   a clip without an answer gets its reason in `fallback`. A kill in between collects the
   job again; recorded clips are skipped.
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

import re
import time
from dataclasses import replace
from typing import Any

from agl.contracts.calls import Reply, Request
from agl.core.secrets import known_secrets, scrub
from agl.errors import ModelGone
from agl.inference.batch import state as state_mod
from agl.inference.batch.check import check_jobs, usable
from agl.inference.batch.context import PassContext, PassReport, quiet, short, to_sync
from agl.inference.batch.provider import BatchProvider, JobStatus, Results
from agl.inference.batch.providers import provider_class
from agl.inference.batch.state import BatchState, Job
from agl.inference.batch.submit import screen, submit
from agl.inference.runner import scrub_reply
from agl.inference.work import Answer, Sink

__all__ = ["FIND_GRACE_S", "PassContext", "PassReport", "run_pass"]

# A job record without a provider id younger than this is not given up when the provider's
# list does not show it yet (a list may lag a create): its clips stay held for a later pass.
FIND_GRACE_S = 600.0
_LOST = {"completed": "the batch job finished without a result for this clip",
         "expired": "the batch job expired before answering this clip",
         "cancelled": "the batch job was cancelled before answering this clip",
         "unreadable": "the batch job finished, but its results could not be read"}


async def run_pass(ctx: PassContext, requests: list[Request], sink: Sink) -> PassReport:
    """One pass for `requests` (the run's unfinished clips); see the module docstring. The
    answers of the jobs it collects go to `sink`; what is left for the synchronous path is
    the report's `sync_now`."""
    state = state_mod.load(ctx.out_dir) or new_state(ctx)
    # Before anything is collected or submitted: a clip the file holds under a wrong name
    # would otherwise be submitted again under its own (paid twice).
    check_jobs(state_mod.state_path(ctx.out_dir), state, ctx.fingerprint, requests,
               ctx.finished)
    if (state.backend, state.model) != (ctx.backend.name, ctx.backend.model):
        state.probe, state.rejected = None, None  # another model: its own probe
        state.backend, state.model = ctx.backend.name, ctx.backend.model
    state.fingerprint = ctx.fingerprint
    fresh = type(ctx.backend)(ctx.backend.model, **ctx.backend.settings)  # the pass's own client
    prov = provider_class(ctx.backend.name)(fresh, ctx.options, state, timeout_s=ctx.timeout_s,
                                            concurrency=ctx.concurrency)
    report = PassReport()

    def save() -> None:
        state_mod.save(ctx.out_dir, state)

    try:
        await _pass(ctx, prov, state, requests, report, save, sink)
    finally:
        save()
        await prov.aclose()
    mine = [j for j in state.jobs if j.fingerprint == ctx.fingerprint]
    report.in_flight_jobs = len(mine)
    report.in_flight_clips = sum(len(j.clips) for j in mine)
    return report


def new_state(ctx: PassContext) -> BatchState:
    return BatchState(backend=ctx.backend.name, model=ctx.backend.model,
                      fingerprint=ctx.fingerprint)


async def _pass(ctx: PassContext, prov: BatchProvider, state: BatchState,
                requests: list[Request], report: PassReport, save, sink: Sink) -> None:
    finished = set(ctx.finished)
    for sid in [s for s in state.fallback if s in finished]:
        del state.fallback[sid]
    for sid in [s for s in state.attempts if s in finished]:
        del state.attempts[sid]
    await _resolve_unconfirmed(prov, state, report, save)
    answered = await _collect(ctx, prov, state, finished, report, save, sink)
    for sid in answered:
        state.fallback.pop(sid, None)
        state.attempts.pop(sid, None)
    todo = [r for r in requests if r.sample_id not in answered | finished]
    await _route(ctx, prov, state, todo, report, save)


async def _resolve_unconfirmed(prov: BatchProvider, state: BatchState, report: PassReport,
                               save) -> None:
    for job in [j for j in state.jobs if j.job_id is None]:
        try:
            found = await prov.find(job)
        except Exception as exc:  # noqa: BLE001 - its clips stay held; the next pass asks again
            report.messages.append(f"could not look up job {job.tag} ({short(exc)}); its "
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
            await quiet(prov.cleanup(job, None))
        save()


async def _collect(ctx: PassContext, prov: BatchProvider, state: BatchState,
                   finished: set[str], report: PassReport, save, sink: Sink) -> set[str]:
    """Poll every live job once; hand what the finished ones answered to `sink`."""

    answered: set[str] = set()
    now = time.time()
    for job in [j for j in state.jobs if j.job_id is not None]:
        try:
            st = await prov.status(job)
        except Exception as exc:  # noqa: BLE001 - polled again next pass
            report.messages.append(f"could not poll job {job.job_id} ({short(exc)}); "
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
                                           f"({short(exc)})")
            continue
        try:
            got = await prov.results(job, st)
        except Exception as exc:  # noqa: BLE001 - the job stays; the next pass retries
            got, st = _unreadable(job, st, exc, ctx.options.result_tries, report)
            save()
            if got is None:
                continue
        results, ignored = usable(job, got)
        _stop_if_gone(ctx, results)
        if ignored:
            report.messages.append(ignored)
        answers = _job_answers(ctx, state, job, st, (results, got.conflicts),
                               finished | answered)
        for a in answers:
            await sink.put(a)
        await sink.flush()  # durable records before the job leaves the state file
        answered |= {a.request.sample_id for a in answers}
        report.collected += len(answers)
        _after_job(state, job, st, results, report, ctx.backend.settings)
        state.jobs.remove(job)
        save()
        await quiet(prov.cleanup(job, st))
        save()
    return answered


# A result line saying the model itself is gone (OpenAI's codes, a 404 naming the model as
# OpenAI, vLLM and Gemini word it): the synchronous path's ModelGone (agl.backends'
# model_gone), read from the line's text, since a batch line carries no exception.
_GONE = re.compile(r"model_not_found|model_decommissioned|model_deprecated|"
                   r"\b404\b.*\bmodel\b.*\b(does not exist|not exist|not found)", re.I | re.S)


def _unreadable(job: Job, st: JobStatus, exc: Exception, tries: int,
                report: PassReport) -> tuple[Results | None, JobStatus]:
    """A finished job whose results could not be read: the next pass tries again, up to
    `tries` passes in a row; then the job is given up with no results, and its clips fall back
    like an expired job's (a result file the provider lost would otherwise answer 404 on every
    pass, and every pass would exit 75)."""
    job.result_failures += 1
    if job.result_failures < tries:
        report.messages.append(f"could not read the results of job {job.job_id} ({short(exc)}); "
                               f"rerun later (try {job.result_failures} of {tries})")
        return None, st
    report.messages.append(f"could not read the results of job {job.job_id} in {tries} passes "
                           f"({short(exc)}); given up: its clips fall back")
    return Results(), replace(st, outcome="unreadable")


def _stop_if_gone(ctx: PassContext, results: dict[str, Reply | str]) -> None:
    """The run's end, not the clips': a job whose lines say the model is gone stops the run
    before any of them is recorded (the job stays in the state file; a rerun stops again)."""
    for text in results.values():
        if isinstance(text, str) and _GONE.search(text):
            backend = ctx.backend
            msg = scrub(text, known_secrets(backend.settings))
            raise ModelGone(f"{backend.name}:{backend.model} is gone: {msg}",
                            model=backend.model, provider_message=msg)


def _job_answers(ctx: PassContext, state: BatchState, job: Job, st: JobStatus,
                 got: tuple[dict[str, Reply | str], set[str]], done: set[str]) -> list[Answer]:
    """The answers of a finished job this run records (its fingerprint's, not recorded yet);
    a clip it did not answer (or answered twice, differently: in `conflicts`) gets its
    reason in `state.fallback`. `got`: its usable results and its conflicts."""
    results, conflicts = got
    secrets = known_secrets(ctx.backend.settings)
    mine = job.fingerprint == ctx.fingerprint
    answers = []
    for sid, info in job.clips.items():
        res = results.get(sid)
        if isinstance(res, Reply):
            reply = scrub_reply(res, secrets)
            if (ctx.cache is not None and info.get("key") and ctx.backend.deterministic):
                # The entry a synchronous call would have left (its reply, one attempt).
                ctx.cache.put(info["key"], replace(reply, extra={
                    **reply.extra, "attempts": 1, "cached": False}))
            if not mine or sid in done:
                continue  # another prompt's job (cached only), or recorded by a killed pass
            reply = replace(reply, extra={**reply.extra, "attempts": 1, "cached": False,
                                          "answered_by": "batch", "batch_job": job.job_id,
                                          **({"audio_sha256": info["audio_sha256"]}
                                             if info.get("audio_sha256") else {})})
            # Priced at the batch discount; an earlier run requested it. The record needs only
            # the request's id and audio hash (the job's own).
            request = Request(sample_id=sid, prompt="", audio_sha256=info.get("audio_sha256"))
            answers.append(Answer(request, reply, price_factor=ctx.options.price_factor,
                                  requested_now=False))
        elif mine and sid not in done:
            if sid in conflicts:
                reason = "the batch job returned two different replies for this clip"
            elif isinstance(res, str):
                reason = f"batch request failed: {res}"
            elif st.outcome == "failed":
                reason = f"the batch job failed: {st.error or st.state}"
            else:
                reason = _LOST[st.outcome]
            state.fallback[sid] = scrub(reason[:500], secrets)
    return answers


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
            to_sync(report, r, f"batch not accepted for this model: {state.rejected}")
        elif sid in state.fallback and (opts.fallback == "sync"
                                        or state.attempts.get(sid, 0) >= opts.max_attempts):
            to_sync(report, r, state.fallback[sid])
        else:
            batchable.append(r)
    if state.rejected is not None and any(r.sample_id not in held for r in todo):
        report.messages.append(f"{ctx.backend.name}:{ctx.backend.model}: "
                               f"{state.rejected}; running synchronously")
    batchable = await screen(ctx, batchable, report)
    if not batchable:
        return
    running = state.probe is not None and state.probe.get("status") == "running"
    if opts.probe and (state.probe is None or running):
        if running:
            report.waiting += len(batchable)
            return
        probe, rest = batchable[:2], batchable[2:]
        await submit(ctx, prov, state, probe, report, save, probe=True)
        if state.rejected is not None:
            for r in rest:
                to_sync(report, r, f"batch not accepted for this model: {state.rejected}")
        else:
            report.waiting += len(rest)
            if rest:
                report.messages.append(f"{len(rest)} clip(s) wait for the probe job's answer")
        return
    await submit(ctx, prov, state, batchable, report, save, probe=False)
