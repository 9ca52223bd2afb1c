"""The run driver: one model's benchmark run into a durable, resumable run folder.

`run_inference(spec, prompt, clips, out_dir=..., audio_root=..., options=...)` appends every
result to `<out>/predictions.jsonl` (fsync'd) the moment it arrives; a rerun skips finished
clips and retries failed ones; `<out>/run_summary.json` holds the totals. At the end the
folder is made canonical (`agl.inference.finalize`). `run_spec` runs one model of params.yaml
(`agl.inference.runspec`) over a manifest (`agl.inference.params_run`).

The driver plans the run (which records are kept, which clips are pending, their requests),
hands the pending requests to an executor (`agl.inference.executors`: `local`, the async
runner; `batch`, the provider's batch API), makes each answer a prediction record as it
arrives (`agl.inference.sink`: parsed, priced, without non-finite numbers or secrets) and
the records the run's summary (`agl.inference.summary`). Executors only answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend, get_backend
from agl.contracts.calls import Request
from agl.contracts.long_audio import NATIVE, LongAudio
from agl.contracts.models import ModelSpec
from agl.core.audio import clip_seconds
from agl.core.single_writer import exclusive
from agl.errors import AglError
from agl.inference.cache import ResponseCache, cache_key, generation_settings
from agl.inference.executors import Executor, executor_for
from agl.inference.finalize import PREDICTIONS, canonical_records, write_canonical_run
from agl.inference.freshness import current_audio, dataset_digest, hash_files, stale, stale_line
from agl.inference.record import RunContext
from agl.inference.runner import RunOptions, progress_bar
from agl.inference.sink import RecordSink
from agl.inference.summary import run_summary
from agl.inference.windowed import WindowSink, clip_plan, failed_clip, part_request, window_requests
from agl.inference.work import Work
from agl.predictions.records import PredictionWriter, iter_records, write_predictions
from agl.prompts import Prompt

_DEFAULT_OPTIONS = RunOptions()  # one shared default, as a default argument value would be


def run_fingerprint(backend_name: str, model: str, settings: dict[str, Any],
                    prompt_sha256: str, long_audio: LongAudio = NATIVE) -> str:
    """What makes two runs' records interchangeable; stored on every record's meta. A
    long-audio protocol other than `native` is part of it (a first-30-s answer never stands
    in for a whole-clip one); `native` leaves the fingerprint as it always was."""
    material = {"backend": backend_name, "model": model, "prompt": prompt_sha256,
                "settings": generation_settings(settings)}
    if long_audio.windowed:
        material["long_audio"] = long_audio.protocol()
    blob = json.dumps(material, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sends_tags(spec: ModelSpec, options: RunOptions) -> bool:
    """Whether a run sends each clip's file as published, tags and all: a `paper` protocol
    entry (the authors base64-encoded the raw file, openllm.py L666-715, L773-790) or the
    `tags` intervention (`options.send_tags`). Every other run sends the sound alone."""
    return spec.protocol == "paper" or options.send_tags


def run_inference(
    spec: ModelSpec,
    prompt: Prompt,
    clips: Sequence[Any],
    *,
    out_dir: Path,
    audio_root: Path | None,
    options: RunOptions = _DEFAULT_OPTIONS,
    backend: Backend | None = None,
) -> dict[str, Any]:
    """Run one model over `clips` (manifest order; the first `options.limit` if given).

    `spec` names the backend, model, settings and prices; its `prompt` and `concurrency`
    overrides are the caller's to resolve (`run_spec` does) into `prompt` and `options`.
    `backend`: an instance to use instead of building one from `spec` (a replica pool).
    Records whose run fingerprint (backend, model, generation settings, prompt hash; the
    dataset, for a backend that reads all of it) differs from this run's are dropped first,
    so a changed prompt never mixes with old answers (unchanged calls still come from the
    cache); so are records whose clip's audio is gone or changed since they were made
    (agl.inference.freshness), so a stale answer is never kept, never scored. Returns the
    summary also written to `<out_dir>/run_summary.json`.

    One writer per run folder (agl.core.single_writer): a second run into `out_dir` while
    this one runs refuses in one line naming this one, instead of requesting every clip
    again; batch mode takes the same lock inside (re-entrant: one lock, not two).
    """
    with exclusive(out_dir, "this model run (--out)"):
        return _run_locked(spec, prompt, clips, out_dir=Path(out_dir), audio_root=audio_root,
                           options=options, backend=backend)


@dataclass(frozen=True)
class _Plan:
    """What a run has to do: its clips, the records kept from earlier runs, what is pending."""

    all_clips: list[Any]
    selected: list[Any]
    pending: list[Any]
    ctx: RunContext
    finished: frozenset[str]  # clips holding a finished record (any of the kept ones)


def settings_where(spec: ModelSpec) -> str:
    """How a message names an entry's settings: the params.yaml key, or the flag."""
    where = "agl infer --setting" if spec.name == "cli" else f"models.{spec.name}.settings"
    return f"{where} ({spec.backend} backend)"


def _run_locked(spec: ModelSpec, prompt: Prompt, clips: Sequence[Any], *, out_dir: Path,
                audio_root: Path | None, options: RunOptions,
                backend: Backend | None) -> dict[str, Any]:
    settings = dict(spec.settings or {})
    backend_cls = get_backend(spec.backend)
    backend_cls.check_settings(settings, settings_where(spec))  # before any work, cached or not
    # mode: batch hands clips to the provider's batch API; else params.yaml `executor.kind`
    executor = executor_for(settings, options.transport.kind)
    plan = _plan(spec, prompt, list(clips), out_dir, audio_root, options, backend_cls)
    plan, before, backend = _rederive(plan, spec, options, backend_cls, backend, executor)
    _check_long_audio(spec, backend_cls, executor)
    _check_spend_cap(spec, options, executor)
    t0 = time.perf_counter()
    session = {"requests": 0, "cache_hits": 0, "cost_usd": 0.0}
    report = None
    if plan.pending:
        backend = options.bound(backend or backend_cls(spec.model, **settings))
        job = _work(plan, spec, options, out_dir, audio_root, backend)
        executor.check(out_dir)
        try:
            report = asyncio.run(_drive(executor, job, backend, plan.ctx, session))
        except BaseException:
            _one_line_per_clip(plan.ctx.pred_path)
            raise
    wall = time.perf_counter() - t0

    pred_path = plan.ctx.pred_path
    latest = {p.sample_id: p for p in iter_records(pred_path)} if pred_path.exists() else {}
    _say_rebuilt(pred_path, before, latest, backend_cls)
    chosen = [latest[c.key] for c in plan.selected if c.key in latest]
    truth = ({c.key: (c.latitude, c.longitude) for c in plan.selected}
             if spec.long_audio.windowed else None)
    summary = run_summary(chosen, len(plan.selected), plan.ctx, wall, session, truth)
    summary = executor.summarize(summary, chosen, settings, out_dir, report)
    # The tracked files hold what data, params and code decide (canonical order and floats);
    # latencies, attempts, cache hits and wall time go to a timings file DVC ignores.
    served = write_canonical_run(out_dir, pred_path, latest, [c.key for c in plan.all_clips],
                                 summary)
    return {**summary, **served}


def _one_line_per_clip(pred_path: Path) -> None:
    """After a run that stopped (a retired model, no network, the spend cap, Ctrl-C), the
    predictions file with one line per clip, its newest: a rerun serves its kept records from
    the cache again (_rederive), and the canonical rewrite at the end, which drops the older
    line, is never reached when the run stops. A file that cannot be read is left as it is;
    the stop's own error is what the user must see."""
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lines = sum(1 for x in pred_path.read_bytes().splitlines() if x.strip())
        latest = {p.sample_id: p for p in iter_records(pred_path)}
        if lines != len(latest):
            write_predictions(pred_path, list(latest.values()))


def _check_long_audio(spec: ModelSpec, backend_cls: type[Backend], executor: Executor) -> None:
    """A long-audio protocol this run cannot carry out is one line before any request."""
    cfg, where = spec.long_audio, f"model {spec.name}: long_audio.mode {spec.long_audio.mode}"
    if not cfg.windowed:
        return
    if not backend_cls.needs_audio:
        raise AglError(f"{where}: the {spec.backend} backend does not listen to the audio; "
                       "leave long_audio out (or mode: native)")
    if cfg.mode == "multi_part" and not backend_cls.multi_part:
        raise AglError(f"{where}: the {spec.backend} backend sends one audio part per prompt; "
                       "use windows (one request per window, answers combined) or truncate, or "
                       "a backend that takes several parts (transformers, gemini, openai, openai-compatible)")
    if not executor.local:
        raise AglError(f"{where}: windows are cut by the local executor only (the "
                       f"{executor.name} executor sends whole files); run it {executor.instead}")


def _check_spend_cap(spec: ModelSpec, options: RunOptions, executor: Executor) -> None:
    """A spend cap this run cannot hold is one line before any request: the local executor
    holds each request against it (`Executor.local`); another could pass the cap."""
    caps = [k for k in ("max_spend_usd", "max_total_spend_usd") if getattr(options, k) is not None]
    if caps and not executor.local:
        raise AglError(f"model {spec.name}: infer.{' and infer.'.join(caps)} is held by the local "
                       f"executor only (the {executor.name} executor could pass it); run it "
                       f"{executor.instead}, or set the cap to null")


def _plan(spec: ModelSpec, prompt: Prompt, all_clips: list[Any], out_dir: Path,
          audio_root: Path | None, options: RunOptions, backend_cls: type[Backend]) -> _Plan:
    """Keep the records of this run's fingerprint whose audio is unchanged (rewriting the
    file without the others, saying so), and list the selected clips still to answer."""
    selected = all_clips[: options.limit] if options.limit is not None else all_clips
    pred_path = out_dir / PREDICTIONS
    fingerprint = run_fingerprint(spec.backend, spec.model, dict(spec.settings or {}), prompt.sha256,
                                  spec.long_audio)
    records = list(iter_records(pred_path)) if pred_path.exists() else []
    # Today's audio of every clip a kept record (or, for a backend that reads the whole
    # dataset, its answers) stands on (agl.inference.freshness).
    audio: dict[str, str | None] | None = None
    if backend_cls.needs_audio:
        if audio_root is None:
            raise AglError("this backend listens to the audio; pass --audio-root")
        recorded = {p.sample_id for p in records}
        audio = current_audio([c for c in all_clips if backend_cls.reads_dataset
                               or c.key in recorded], Path(audio_root))
    if backend_cls.reads_dataset:
        fingerprint = hashlib.sha256(
            f"{fingerprint}:{dataset_digest(all_clips, audio)}".encode()).hexdigest()[:16]
    inputs = backend_cls.inputs_digest(dict(spec.settings or {}))
    if inputs is not None:  # the files besides the audio its answers stand on (the cascade's)
        fingerprint = hashlib.sha256(f"{fingerprint}:inputs{inputs}".encode()).hexdigest()[:16]
    if options.repeat:  # a repeat's records never stand in for another repeat's
        fingerprint = hashlib.sha256(f"{fingerprint}:repeat{options.repeat}".encode()).hexdigest()[:16]
    tags = backend_cls.needs_audio and sends_tags(spec, options)
    if tags:  # answers to the file with its tags never stand in for answers to the sound alone
        fingerprint = hashlib.sha256(f"{fingerprint}:tags".encode()).hexdigest()[:16]
    ctx = RunContext(spec, prompt, fingerprint, pred_path, options.progress, tags_sent=tags)

    same = [p for p in records if p.meta.get("run_fingerprint") == fingerprint]
    if len(same) != len(records):
        print(f"{pred_path}: {len(records) - len(same)} record(s) from a different "
              "model/settings/prompt" + (" or dataset" if backend_cls.reads_dataset else "")
              + " dropped; they are requested again", file=sys.stderr)
    kept: dict[str, Any] = {p.sample_id: p for p in same}
    # A record made from audio that is gone or changed is never kept (never scored).
    reasons = stale(kept, audio) if audio is not None else {}
    if reasons:
        print(stale_line(pred_path, reasons), file=sys.stderr)
        kept = {k: p for k, p in kept.items() if k not in reasons}
    if len(same) != len(records) or reasons:
        write_predictions(pred_path, [p for p in same if p.sample_id in kept])
    finished = {k for k, p in kept.items() if p.finished}
    return _Plan(all_clips, selected, [c for c in selected if c.key not in finished], ctx,
                 frozenset(p.sample_id for p in same if p.sample_id in kept and p.finished))


def _rederive(plan: _Plan, spec: ModelSpec, options: RunOptions, backend_cls: type[Backend],
              backend: Backend | None, executor: Executor) -> tuple[_Plan, dict[str, Any], Backend | None]:
    """An output is derived, never trusted: a kept record is answered again where that costs
    nothing, so a line edited after the run cannot survive a rerun (or `dvc repro -f`).
    A backend that computes its answers offline (`Backend.recompute`) answers every clip
    again; a record whose reply is in the cache is served from it again (no request). Only
    a record with neither (a sampled or uncached API reply: paid for) is kept as it is.
    Returns the plan with those clips pending, the records they had, and the backend."""
    kept = [c for c in plan.selected if c.key in plan.finished]
    if spec.long_audio.windowed and not backend_cls.recompute:
        # A windowed record answers several cached replies, not the clip's one: kept as is.
        return plan, {}, backend
    if not kept or not executor.rederives:  # e.g. a batch record: its price is the provider's
        return plan, {}, backend
    records = {p.sample_id: p for p in iter_records(plan.ctx.pred_path)}  # read once
    if backend_cls.recompute:
        again = {c.key for c in kept}
    elif options.cache_dir is None:
        return plan, {}, backend
    else:
        try:
            backend = backend or backend_cls(spec.model, **dict(spec.settings or {}))
        except AglError:  # e.g. no key: a rerun that asks nothing needs none
            return plan, {}, backend
        if not backend.deterministic:
            return plan, {}, backend
        again = _cached(plan, records, backend, ResponseCache(options.cache_dir), kept, options.repeat)
    if not again:
        return plan, {}, backend
    before = {k: records[k] for k in again if k in records}
    pending = [c for c in plan.selected if c.key not in plan.finished or c.key in again]
    return replace(plan, pending=pending, finished=plan.finished - again), before, backend


def _cached(plan: _Plan, records: dict[str, Any], backend: Backend, cache: ResponseCache,
            kept: list[Any], repeat: int) -> set[str]:
    """The kept clips whose request (as its record says it was made) has a cached reply."""
    system = backend.settings.get("system_prompt")
    out = set()
    for c in kept:
        sha = records[c.key].meta.get("audio_sha256") if c.key in records else None
        if backend.needs_audio and not sha:
            continue
        request = backend.compose(Request(
            sample_id=c.key, prompt=plan.ctx.prompt.text,
            audio_path=Path(c.relpath) if backend.needs_audio else None,
            audio_sha256=sha if backend.needs_audio else None, system=system, repeat=repeat,
            tags=plan.ctx.tags_sent), c)
        if cache.get(cache_key(backend.name, backend.model, backend.settings, request)) is not None:
            out.add(c.key)
    return out


def _say_rebuilt(pred_path: Path, before: dict[str, Any], latest: dict[str, Any],
                 backend_cls: type[Backend]) -> None:
    """One line when records answered again differ from what the file held (an edit)."""
    changed = [k for k, p in before.items()
               if k in latest and canonical_records({k: p}, [k])[0] != canonical_records({k: latest[k]}, [k])[0]]
    if changed:
        how = "computed again" if backend_cls.recompute else "served again from the reply cache"
        print(f"{pred_path}: {len(changed)} record(s) differed from their answer {how} (first: "
              f"{changed[0]}; edited after the run?): rebuilt, never scored as edited",
              file=sys.stderr)


def _work(plan: _Plan, spec: ModelSpec, options: RunOptions, out_dir: Path,
          audio_root: Path | None, backend: Backend) -> _Windowing:
    """The pending clips as requests (the backend prepared with the whole manifest): one per
    clip, or one per window under a long-audio protocol."""
    if backend.needs_audio:
        _require_audio(plan.pending, audio_root)
    backend.prepare(plan.all_clips, audio_root)
    paths = [Path(audio_root) / c.relpath if backend.needs_audio else None for c in plan.pending]
    # The bytes each request carries, hashed once: the cache key, and the record's
    # `audio_sha256` (what a rerun checks the audio against).
    hashes = hash_files(paths) if backend.needs_audio else [None] * len(paths)
    # `system_prompt`: a setting, so it is in the run's fingerprint (the paper protocol's
    # Qwen2.5-Omni and Gemma-3n system prompts, openllm.py L424 and L304).
    system = spec.settings.get("system_prompt") if spec.settings else None
    requests = tuple(backend.compose(Request(sample_id=c.key, prompt=plan.ctx.prompt.text,
                                             audio_path=path, audio_sha256=h, system=system,
                                             repeat=options.repeat,
                                             tags=plan.ctx.tags_sent), c)
                     for c, path, h in zip(plan.pending, paths, hashes, strict=True))
    work = Work(requests=requests, spec=spec, options=options, out_dir=out_dir,
                fingerprint=plan.ctx.fingerprint, finished=plan.finished,
                clips=tuple(plan.all_clips), audio_root=audio_root)
    if spec.long_audio.windowed:
        return _windowed(work, spec.long_audio)
    # The seconds a served model is sent (the whole file): every record says what was heard.
    heard = ({r.sample_id: s for r in requests if (s := _seconds(r.audio_path)) is not None}
             if backend.probe_first and backend.needs_audio else {})
    return _Windowing(work, heard)


def _seconds(path: Path | None) -> float | None:
    """The file's length from its header (None: unreadable; the runner's probe fails it)."""
    try:
        return round(clip_seconds(path), 3) if path is not None else None
    except Exception:  # noqa: BLE001 - soundfile raises several kinds for a file it cannot read
        return None


@dataclass(frozen=True)
class _Windowing:
    """The work and how its answers become records: whole clips (`heard_s`: seconds sent per
    clip), or a long-audio protocol's windows (`plans`, per clip; `failed`: clips that
    could not be cut, recorded as failures without a request)."""

    work: Work
    heard: dict[str, float]
    cfg: LongAudio = NATIVE
    plans: dict[str, Any] | None = None
    failed: tuple[Any, ...] = ()


def _windowed(work: Work, cfg: LongAudio) -> _Windowing:
    """Each clip's request as one request per window of its plan (agl.inference.windowed)."""
    plans, requests, failed = {}, [], []
    for r in work.requests:
        plan = clip_plan(r.sample_id, Path(r.audio_path), r.audio_sha256, cfg)
        if plan.error:
            failed.append(plan)
            continue
        plans[r.sample_id] = plan
        requests.extend([part_request(r, plan)] if cfg.mode == "multi_part" else window_requests(r, plan))
    return _Windowing(replace(work, requests=tuple(requests)), {}, cfg, plans, tuple(failed))


async def _drive(executor: Executor, job: _Windowing, backend: Backend, ctx: RunContext,
                 session: dict[str, float]) -> Any:
    """The executor answers; each answer becomes a durable record as it arrives (a windowed
    clip's once its last window is in)."""
    work = job.work
    clips = len(job.plans) + len(job.failed) if job.plans is not None else len(work.requests)
    bar = progress_bar(clips, backend, enabled=ctx.progress)
    try:
        with PredictionWriter(ctx.pred_path) as writer:
            records = RecordSink(writer, backend, ctx, session, bar, heard_s=job.heard)
            sink: Any = records
            if job.plans is not None:
                base = {"backend": backend.name, "model": backend.model, "prompt": ctx.prompt.name,
                        "prompt_sha256": ctx.prompt.sha256, "run_fingerprint": ctx.fingerprint,
                        "long_audio": job.cfg.mode}
                for plan in job.failed:
                    await records.put_prediction(failed_clip(plan, {**base, "audio_sha256": plan.audio_sha256}),
                                                 True)
                sink = WindowSink(records, job.plans, job.cfg)
            try:
                return await executor.answer(work, backend, sink)
            finally:
                await sink.flush()
    finally:
        bar.close()
        await backend.aclose()


def _require_audio(clips: Sequence[Any], audio_root: Path | None) -> None:
    if audio_root is None:
        raise AglError("this backend listens to the audio; pass --audio-root")
    if not Path(audio_root).is_dir():
        raise AglError(f"--audio-root {audio_root}: no such folder (the dataset's audio, e.g. data/audio)")
    missing = [c for c in clips if not (Path(audio_root) / c.relpath).is_file()]
    if missing and len(missing) == len(clips):  # a wrong folder, more likely than no audio
        raise AglError(
            f"none of the {len(clips)} audio file(s) is under {audio_root} (looked for e.g. "
            f"{Path(audio_root) / missing[0].relpath}): is it the dataset's audio folder? "
            "`agl download` fills data/audio"
        )
    if missing:
        raise AglError(
            f"{len(missing)} of {len(clips)} audio file(s) missing under {audio_root}, e.g. "
            f"{Path(audio_root) / missing[0].relpath}; download the audio first (agl download)"
        )
