"""One model's benchmark run: every clip through the runner into a durable, resumable run folder.

`run_inference(spec, prompt, clips, out_dir=..., audio_root=..., options=...)` appends every
result to `<out>/predictions.jsonl` (fsync'd) the moment it arrives; a rerun skips finished
clips and retries failed ones; `<out>/run_summary.json` holds the totals. At the end the
folder is made canonical (`agl.inference.finalize`). `run_spec` runs one model of params.yaml
(`agl.inference.runspec`) over a manifest.

The requests themselves (concurrency, timeout, retries, cache) are the runner's
(`agl.inference.runner`); here each reply becomes a prediction record (parsed, priced, without
non-finite numbers or secrets) and the records become the run's summary.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import sys
import time
import warnings
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend, get_backend
from agl.backends.endpoints import pool_capacity
from agl.contracts.calls import Reply, Request
from agl.contracts.models import ModelSpec
from agl.core.secrets import known_secrets, scrub
from agl.core.single_writer import exclusive
from agl.core.workspace import shared_path
from agl.dataset.manifest import ManifestWarning, load_manifest
from agl.dataset.manifest import clips as manifest_clips
from agl.errors import AglError
from agl.inference.batch.hook import batch_session, batch_summary, summary_text
from agl.inference.cache import ResponseCache, generation_settings, public_settings
from agl.inference.finalize import PREDICTIONS, write_canonical_run
from agl.inference.freshness import current_audio, dataset_digest, hash_files, stale, stale_line
from agl.inference.record import RunContext, make_prediction
from agl.inference.runner import Backoff, RunOptions, progress_bar, stream
from agl.inference.runspec import InferSettings, prompt_source
from agl.predictions.records import (
    Prediction,
    PredictionWriter,
    Status,
    iter_records,
    write_predictions,
)
from agl.prompts import Prompt, load_prompt

_DEFAULT_OPTIONS = RunOptions()  # one shared default, as a default argument value would be


def run_fingerprint(backend_name: str, model: str, settings: dict[str, Any],
                    prompt_sha256: str) -> str:
    """What makes two runs' records interchangeable; stored on every record's meta."""
    blob = json.dumps({"backend": backend_name, "model": model, "prompt": prompt_sha256,
                       "settings": generation_settings(settings)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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


def _run_locked(spec: ModelSpec, prompt: Prompt, clips: Sequence[Any], *, out_dir: Path,
                audio_root: Path | None, options: RunOptions,
                backend: Backend | None) -> dict[str, Any]:
    settings = dict(spec.settings or {})
    all_clips = list(clips)
    selected = all_clips[: options.limit] if options.limit is not None else all_clips
    out_dir = Path(out_dir)
    pred_path = out_dir / PREDICTIONS
    fingerprint = run_fingerprint(spec.backend, spec.model, settings, prompt.sha256)
    backend_cls = get_backend(spec.backend)
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
    ctx = RunContext(spec, prompt, fingerprint, pred_path, options.progress)

    kept: dict[str, Any] = {}
    same = [p for p in records if p.meta.get("run_fingerprint") == fingerprint]
    if len(same) != len(records):
        print(f"{pred_path}: {len(records) - len(same)} record(s) from a different "
              "model/settings/prompt" + (" or dataset" if backend_cls.reads_dataset else "")
              + " dropped; they are requested again", file=sys.stderr)
    for p in same:
        kept[p.sample_id] = p
    # A record made from audio that is gone or changed is never kept (never scored).
    reasons = stale(kept, audio) if audio is not None else {}
    if reasons:
        print(stale_line(pred_path, reasons), file=sys.stderr)
        kept = {k: p for k, p in kept.items() if k not in reasons}
    if len(same) != len(records) or reasons:
        write_predictions(pred_path, [p for p in same if p.sample_id in kept])
    finished = {k for k, p in kept.items() if p.finished}
    pending = [c for c in selected if c.key not in finished]

    t0 = time.perf_counter()
    session = {"requests": 0, "cache_hits": 0, "cost_usd": 0.0}
    if pending:
        backend = options.bound(backend or backend_cls(spec.model, **settings))
        if backend.needs_audio:
            _require_audio(pending, audio_root)
        backend.prepare(all_clips, audio_root)
        paths = [Path(audio_root) / c.relpath if backend.needs_audio else None for c in pending]
        # The bytes each request carries, hashed once: the cache key, and the record's
        # `audio_sha256` (what a rerun checks the audio against).
        hashes = hash_files(paths) if backend.needs_audio else [None] * len(paths)
        requests = [Request(sample_id=c.key, prompt=prompt.text, audio_path=path, audio_sha256=h)
                    for c, path, h in zip(pending, paths, hashes, strict=True)]
        cache = ResponseCache(options.cache_dir) if options.cache_dir is not None else None
        # mode: batch hands clips to the provider's batch API (agl.inference.batch); sync: a guard only
        with batch_session(backend, requests, run=ctx, out_dir=out_dir, cache=cache,
                           options=options) as batch:
            requests = batch.requests
            source = batch.tag(stream(backend, requests, cache=cache, concurrency=options.concurrency,
                                      timeout_s=options.timeout_s, max_retries=options.max_retries,
                                      backoff=options.backoff), requests)
            asyncio.run(_consume(backend, requests, source, ctx, session))
    wall = time.perf_counter() - t0

    latest = {p.sample_id: p for p in iter_records(pred_path)} if pred_path.exists() else {}
    chosen = [latest[c.key] for c in selected if c.key in latest]
    summary = _summary(chosen, len(selected), ctx, wall, session)
    summary = batch_summary(summary, chosen, settings, out_dir, batch.report if pending else None)
    # The tracked files hold what data, params and code decide (canonical order and floats);
    # latencies, attempts, cache hits and wall time go to a timings file DVC ignores.
    write_canonical_run(out_dir, pred_path, latest, [c.key for c in all_clips], summary)
    return summary


def run_spec(spec: ModelSpec, infer: InferSettings, *, manifest: str | Path,
             audio_root: str | Path | None, out_dir: str | Path, limit: int | None = None,
             progress: bool = True, telemetry: str | Path | None = None,
             sources: Any = None) -> dict[str, Any]:
    """Run one model of params.yaml over a manifest; returns the run summary.

    A model served by several replicas (`base_url` a list, see agl.backends.endpoints) runs with the
    replicas' total concurrency unless the entry sets its own; the returned summary (not the
    file) gains `endpoints` (requests, failures, latency per endpoint), also written to
    `telemetry` when given: timings stay out of DVC's outputs. `sources` (a SourceConfig)
    resolves a `paper:<name>` prompt source (default: params.yaml's `paper:` in the working
    directory; a stage passes the keys it declared)."""
    with warnings.catch_warnings():
        warnings.simplefilter("default", ManifestWarning)
        frame = load_manifest(manifest)
    prompt = load_prompt(spec.prompt or infer.prompt, source=prompt_source(spec, infer),
                         sources=sources)
    capacity = pool_capacity(spec.settings) if spec.backend == "openai-compatible" else None
    backend = None
    if capacity is not None:
        backend = get_backend(spec.backend)(spec.model, **spec.settings)
    options = RunOptions(
        cache_dir=shared_path(infer.cache_dir) if infer.cache_dir else None,
        concurrency=int(spec.concurrency or capacity or infer.concurrency),
        timeout_s=float(infer.timeout_s), max_retries=int(infer.max_retries),
        backoff=Backoff(retry_after_cap_s=float(infer.retry_after_cap_s)),
        progress=progress, limit=limit if limit is not None else infer.limit,
        max_reply_bytes=int(infer.max_reply_bytes), max_batch_bytes=int(infer.max_batch_bytes),
    )
    summary = run_inference(spec, prompt, manifest_clips(frame),
                            out_dir=Path(out_dir), audio_root=Path(audio_root) if audio_root else None,
                            options=options, backend=backend)
    if backend is not None:
        summary = {**summary, "endpoints": backend.endpoint_report()}
        if telemetry is not None:
            Path(telemetry).parent.mkdir(parents=True, exist_ok=True)

            Path(telemetry).write_text(json.dumps(scrub({"run": spec.name,
                                                         "endpoints": summary["endpoints"]}),
                                                  indent=2) + "\n", encoding="utf-8")
    return summary


def _require_audio(clips: Sequence[Any], audio_root: Path | None) -> None:
    if audio_root is None:
        raise AglError("this backend listens to the audio; pass --audio-root")
    missing = [c for c in clips if not (Path(audio_root) / c.relpath).is_file()]
    if missing:
        raise AglError(
            f"{len(missing)} of {len(clips)} audio file(s) missing under {audio_root}, e.g. "
            f"{Path(audio_root) / missing[0].relpath}; download the audio first (agl download)"
        )


async def _consume(backend: Backend, requests: list[Request],
                   source: AsyncIterator[tuple[int, Reply]], ctx: RunContext,
                   session: dict[str, float]) -> None:
    """Consume (index, reply) pairs from `source` into durable prediction records."""
    bar = progress_bar(len(requests), backend, enabled=ctx.progress)
    tally = {"failures": 0}
    secrets = known_secrets(backend.settings)
    buffer: list[Any] = []
    flushing: asyncio.Future | None = None

    async def flush(writer: PredictionWriter) -> None:
        # Group commit off the event loop: every record that arrived while the previous
        # fsync ran goes out with the next one, so the disk's fsync rate never caps the
        # request rate. A record counts (progress, session totals) once it is durable.
        while buffer:
            batch = buffer[:]
            buffer.clear()
            await asyncio.to_thread(writer.write_many, batch)
            for pred in batch:
                session["requests"] += pred.meta["attempts"]
                session["cache_hits"] += pred.meta["cached"]
                tally["failures"] += pred.status is Status.FAILED
                session["cost_usd"] += 0.0 if pred.meta["cached"] else pred.meta["cost_usd"]
            bar.set_postfix_str(f"failed={tally['failures']} spend=${session['cost_usd']:.4f}",
                                refresh=False)
            bar.update(len(batch))

    try:
        with PredictionWriter(ctx.pred_path) as writer:
            try:
                async for i, reply in source:
                    if requests[i].audio_sha256:  # what the record answers for (freshness)
                        reply = replace(reply, extra={**reply.extra,
                                                      "audio_sha256": requests[i].audio_sha256})
                    buffer.append(make_prediction(requests[i].sample_id, reply, backend, ctx, secrets))
                    if flushing is None or flushing.done():
                        if flushing is not None:
                            flushing.result()  # a failed write stops the run
                        flushing = asyncio.ensure_future(flush(writer))
            finally:
                if flushing is not None:
                    await flushing
                await flush(writer)
    finally:
        bar.close()
        await backend.aclose()


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    s = sorted(values)
    return {"mean": statistics.fmean(s), "p50": statistics.median(s),
            "p95": s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))], "max": s[-1]}


def _summary(chosen: list[Prediction], n_selected: int, ctx: RunContext, wall: float,
             session: dict[str, float]) -> dict[str, Any]:
    counts = {s.value: 0 for s in Status}
    for p in chosen:
        counts[p.status.value] += 1

    def total(field: str) -> float:
        return sum(float(p.meta.get(field) or 0) for p in chosen)

    spec, prompt = ctx.spec, ctx.prompt
    fresh = [p for p in chosen if not p.meta.get("cached") and p.meta.get("latency_s") is not None]
    local = {k: _stats([float(p.meta[k]) for p in chosen if p.meta.get(k) is not None])
             for k in ("prefill_s", "decode_s", "tokens_per_s")}
    return {
        "backend": spec.backend,
        "model": spec.model,
        "settings": public_settings(dict(spec.settings or {})),
        "prompt": prompt.name,
        "prompt_sha256": prompt.sha256,
        "prompt_source": str(prompt.source),
        "run_fingerprint": ctx.fingerprint,
        "price_in_per_m": spec.price_in_per_m,
        "price_out_per_m": spec.price_out_per_m,
        "n": n_selected,
        "n_recorded": len(chosen),
        "complete": len(chosen) == n_selected and counts["failed"] == 0,
        **{f"n_{k}": v for k, v in counts.items()},
        "input_tokens": int(total("input_tokens")),
        "output_tokens": int(total("output_tokens")),
        "cost_usd": total("cost_usd"),
        "latency_s": _stats([float(p.meta["latency_s"]) for p in fresh]),
        "cached": sum(1 for p in chosen if p.meta.get("cached")),
        "attempts": int(total("attempts")),
        **({f"local_{k}": v for k, v in local.items()} if local["decode_s"]["mean"] else {}),
        "wall_s": wall,
        "session_requests": session["requests"],
        "session_cache_hits": session["cache_hits"],
        "session_cost_usd": session["cost_usd"],
    }


def summary_line(summary: dict[str, Any], *,
                 retry: str = "rerun the same command to retry the failures") -> str:
    """One line (plus one per replica) saying what a run did: counts by status, requests made
    this time and from cache, cost, batch jobs, and what to do about failures (`retry`: the
    command that retries them where the caller is, e.g. a DVC stage's)."""
    s = summary
    line = (f"{s['backend']}:{s['model'] or '-'}: {s['n_recorded']}/{s['n']} clips "
            f"(ok {s['n_ok']}, partial {s['n_partial']}, refused {s['n_refused']}, "
            f"unparseable {s['n_unparseable']}, failed {s['n_failed']}); "
            f"{s['session_requests']} request(s) this time, {s['session_cache_hits']} from cache, "
            f"${s.get('session_cost_usd', 0.0):.4f} spent; the run's answers cost ${s['cost_usd']:.4f}")
    if s["n_failed"]:
        line += f"; {retry}"
    line += summary_text(s)
    for e in s.get("endpoints") or []:
        lat = e["latency_s"]["p50"] if e["latency_s"] else None
        line += (f"\n  {e['url']}: {e['requests']} request(s), {e['failures']} failed"
                 + (f", p50 {lat:.3f} s" if lat is not None else ""))
    return line
