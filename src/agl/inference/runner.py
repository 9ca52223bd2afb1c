"""The runner: many requests through one backend, concurrently, cached, retried, resumable.

Two entry points:

* `complete(backend, requests, ...)`: requests in, replies out (in request order). Judges and
  other text-only callers use it, or `complete_sync(backend_name, model, requests, ...)`.
* `run_inference(...)`: a whole benchmark run for one model. Every result is appended to
  `<out>/predictions.jsonl` (fsync'd) the moment it arrives; a rerun skips finished clips and
  retries failed ones; `<out>/run_summary.json` holds the totals.

Why the pieces are here and not in backends: a backend makes one call. Concurrency (an
asyncio.Semaphore per backend), the request timeout, retries with exponential backoff and
full jitter on retryable `BackendError`s (429 / RESOURCE_EXHAUSTED / 5xx / timeouts, honouring
`retry_after`), and the response cache are the same for every service, so they are written
once. A call that still fails becomes `Reply(status=FAILED, error=...)`, never text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend, BackendError, Reply, ReplyStatus, Request, get_backend
from agl.core.secrets import known_secrets, scrub
from agl.errors import AglError
from agl.inference.cache import ResponseCache, cache_key, generation_settings, public_settings

PREDICTIONS = "predictions.jsonl"
SUMMARY = "run_summary.json"
PROBE_SECONDS = 1.0  # how much of each clip must decode before it is sent


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: attempt k waits U(0, min(cap, base * 2**k)).
    A server's Retry-After wins over the schedule (plus up to 10% jitter, so many waiting
    requests do not return in lockstep)."""

    base_s: float = 1.0
    cap_s: float = 60.0
    # The longest Retry-After honoured (params.yaml infer.retry_after_cap_s). A server that
    # asks for more (`Retry-After: 86400`) fails the clip with its request named, and the
    # run goes on; a rerun retries it.
    retry_after_cap_s: float = 120.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None and retry_after >= 0:
            return retry_after * (1 + 0.1 * random.random())
        return random.uniform(0, min(self.cap_s, self.base_s * 2**attempt))


def _hash_audio(request: Request) -> Request:
    if request.audio_path is None or request.audio_sha256:
        return request
    h = hashlib.sha256()
    with open(request.audio_path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return replace(request, audio_sha256=h.hexdigest())


async def _call(
    backend: Backend,
    request: Request,
    *,
    cache: ResponseCache | None,
    semaphore: asyncio.Semaphore,
    timeout_s: float,
    max_retries: int,
    backoff: Backoff,
) -> Reply:
    """One request to its final reply. `extra` gains `attempts` and `cached`.

    Every reply is scrubbed of the secrets the process knows before anything stores it
    (cache, predictions): a server may echo a key in its reply text as well as its errors."""
    secrets = known_secrets(backend.settings)
    key = None
    if cache is not None and backend.deterministic:
        if request.audio_path is not None and not request.audio_sha256:
            try:
                request = await asyncio.to_thread(_hash_audio, request)
            except OSError as exc:
                return Reply(ReplyStatus.FAILED, error=f"cannot read audio: {exc}",
                             extra={"attempts": 0, "cached": False})
        key = cache_key(backend.name, backend.model, backend.settings, request)
        hit = cache.get(key)
        if hit is not None:  # scrubbed again: an entry may predate a key's rotation
            hit = _scrub_reply(hit, secrets)
            return replace(hit, extra={**hit.extra, "attempts": 0, "cached": True})
    if request.audio_path is not None:
        # Probed before the first request (after a cache hit, which a probed clip earned):
        # a model given a zero-byte, text or undecodable file invents an answer for it. The
        # first PROBE_SECONDS must decode: milliseconds, so requests (and a local backend's
        # batches) are not delayed; a clip cut short later is the download's and the
        # filter's to catch (they decode whole files against the manifest's mp3seconds).
        from agl.core.audio import probe

        got = await asyncio.to_thread(probe, request.audio_path, PROBE_SECONDS)
        if not got.ok:
            return Reply(ReplyStatus.FAILED, error=f"unusable audio, not requested: {got.reason}",
                         extra={"attempts": 0, "cached": False})
    attempt = 0
    while True:
        attempt += 1
        retry_after: float | None = None
        async with semaphore:
            t0 = time.perf_counter()
            try:
                async with asyncio.timeout(timeout_s):  # no extra task, unlike wait_for
                    reply = await backend.generate(request)
                error, retryable = None, False
            except TimeoutError:
                reply, error, retryable = None, f"timed out after {timeout_s:g} s", True
            except BackendError as exc:
                reply, error, retryable = None, str(exc), exc.retryable
                retry_after = exc.retry_after
            except Exception as exc:  # a bug or an SDK surprise: recorded, never raised
                reply, error, retryable = None, f"{type(exc).__name__}: {exc}", False
            latency = time.perf_counter() - t0
        if reply is not None:
            reply = _scrub_reply(reply, secrets)
        error = scrub(error, secrets)
        if reply is not None and reply.status is not ReplyStatus.FAILED:
            reply = replace(
                reply,
                latency_s=reply.latency_s if reply.latency_s is not None else latency,
                extra={**reply.extra, "attempts": attempt, "cached": False},
            )
            if key is not None and cache is not None:
                await asyncio.to_thread(cache.put, key, reply)  # its fsync off the loop
            return reply
        if reply is not None:  # the backend returned FAILED itself: not retried
            return replace(reply, extra={**reply.extra, "attempts": attempt, "cached": False})
        if not retryable or attempt > max_retries:
            if retryable:
                error = f"{error} (gave up after {attempt} attempts)"
            return Reply(ReplyStatus.FAILED, error=error, latency_s=latency,
                         extra={"attempts": attempt, "cached": False})
        if retry_after is not None and retry_after > backoff.retry_after_cap_s:
            return Reply(ReplyStatus.FAILED, latency_s=latency,
                         error=f"{error}; the server asked to wait {retry_after:g} s "
                               f"(Retry-After), more than retry_after_cap_s "
                               f"{backoff.retry_after_cap_s:g} s; rerun later to retry",
                         extra={"attempts": attempt, "cached": False})
        await asyncio.sleep(backoff.delay(attempt - 1, retry_after))


def _scrub_reply(reply: Reply, secrets: list[str]) -> Reply:
    if not secrets:
        return reply
    return replace(reply, text=scrub(reply.text, secrets), error=scrub(reply.error, secrets),
                   extra=scrub(reply.extra, secrets))


async def stream(
    backend: Backend,
    requests: Sequence[Request],
    *,
    cache: ResponseCache | None,
    concurrency: int,
    timeout_s: float,
    max_retries: int,
    backoff: Backoff = Backoff(),
) -> AsyncIterator[tuple[int, Reply]]:
    """(index, reply) pairs in the order replies arrive, at most `concurrency` in flight."""
    if concurrency < 1:
        raise AglError(f"concurrency must be at least 1, got {concurrency}")
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int, r: Request) -> tuple[int, Reply]:
        return i, await _call(backend, r, cache=cache, semaphore=semaphore, timeout_s=timeout_s,
                              max_retries=max_retries, backoff=backoff)

    # Tasks beyond the semaphore wait cheaply; creating them all keeps the pipe full.
    tasks = [asyncio.ensure_future(one(i, r)) for i, r in enumerate(requests)]
    try:
        for fut in asyncio.as_completed(tasks):
            yield await fut
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def complete(
    backend: Backend,
    requests: list[Request],
    *,
    cache: ResponseCache | None,
    concurrency: int,
    timeout_s: float,
    max_retries: int,
    progress: bool = False,
    backoff: Backoff = Backoff(),
) -> list[Reply]:
    """Replies for `requests`, in the same order. Failures are `FAILED` replies."""
    out: list[Reply | None] = [None] * len(requests)
    bar = _progress_bar(len(requests), backend, enabled=progress)
    failures = 0
    async for i, reply in stream(backend, requests, cache=cache, concurrency=concurrency,
                                 timeout_s=timeout_s, max_retries=max_retries, backoff=backoff):
        out[i] = reply
        failures += reply.status is ReplyStatus.FAILED
        bar.set_postfix_str(f"failed={failures}", refresh=False)
        bar.update(1)
    bar.close()
    return [r for r in out if r is not None]


def complete_sync(
    backend_name: str,
    model: str,
    requests: list[Request],
    *,
    settings: dict[str, Any] | None = None,
    cache_dir: Path | None = None,
    concurrency: int = 4,
    timeout_s: float = 120,
    max_retries: int = 5,
    progress: bool = False,
) -> list[Reply]:
    """`complete` for synchronous callers: builds the backend, runs, closes it."""
    backend = get_backend(backend_name)(model, **(settings or {}))
    cache = ResponseCache(cache_dir) if cache_dir is not None else None

    async def go() -> list[Reply]:
        try:
            return await complete(backend, requests, cache=cache, concurrency=concurrency,
                                  timeout_s=timeout_s, max_retries=max_retries, progress=progress)
        finally:
            await backend.aclose()

    return asyncio.run(go())


def cost_usd(reply: Reply, price_in_per_m: float, price_out_per_m: float) -> float:
    """What a reply cost at the given prices per million tokens; a cached reply costs 0."""
    if reply.extra.get("cached"):
        return 0.0
    return ((reply.input_tokens or 0) * price_in_per_m
            + (reply.output_tokens or 0) * price_out_per_m) / 1e6


def _progress_bar(total: int, backend: Backend, *, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{backend.name}:{backend.model}", unit="req",
                file=sys.stderr, disable=not enabled, dynamic_ncols=True)


# --- a whole run ----------------------------------------------------------------------------


def run_fingerprint(backend_name: str, model: str, settings: dict[str, Any],
                    prompt_sha256: str) -> str:
    """What makes two runs' records interchangeable; stored on every record's meta."""
    blob = json.dumps({"backend": backend_name, "model": model, "prompt": prompt_sha256,
                       "settings": generation_settings(settings)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_inference(
    *,
    backend_name: str,
    model: str,
    clips: Sequence[Any],
    audio_root: Path | None,
    out_dir: Path,
    prompt: Any,
    settings: dict[str, Any] | None = None,
    cache_dir: Path | None = None,
    concurrency: int = 4,
    timeout_s: float = 120,
    max_retries: int = 5,
    price_in_per_m: float = 0.0,
    price_out_per_m: float = 0.0,
    limit: int | None = None,
    progress: bool = True,
    backoff: Backoff = Backoff(),
    backend: Backend | None = None,
) -> dict[str, Any]:
    """Run one model over `clips` (manifest order; the first `limit` if given).

    `prompt` is an `agl.prompts.Prompt`. Records whose run fingerprint (backend, model,
    generation settings, prompt hash) differs from this run's are dropped first, so a
    changed prompt never mixes with old answers (unchanged calls still come from the cache).
    Returns the summary also written to `<out_dir>/run_summary.json`.
    """
    from agl.predictions.records import Status, iter_records, write_predictions

    settings = dict(settings or {})
    all_clips = list(clips)
    selected = all_clips[:limit] if limit is not None else all_clips
    out_dir = Path(out_dir)
    pred_path = out_dir / PREDICTIONS
    fingerprint = run_fingerprint(backend_name, model, settings, prompt.sha256)
    backend_cls = get_backend(backend_name)

    kept: dict[str, Any] = {}
    if pred_path.exists():
        records = list(iter_records(pred_path))
        same = [p for p in records if p.meta.get("run_fingerprint") == fingerprint]
        if len(same) != len(records):
            print(f"{pred_path}: {len(records) - len(same)} record(s) from a different "
                  "model/settings/prompt dropped; they are requested again", file=sys.stderr)
            write_predictions(pred_path, same)
        for p in same:
            kept[p.sample_id] = p
    finished = {k for k, p in kept.items() if p.finished}
    pending = [c for c in selected if c.key not in finished]

    t0 = time.perf_counter()
    session = {"requests": 0, "cache_hits": 0}
    if pending:
        backend = backend or backend_cls(model, **settings)
        if backend.needs_audio:
            _require_audio(pending, audio_root)
        backend.prepare(all_clips, audio_root)
        requests = [
            Request(sample_id=c.key, prompt=prompt.text,
                    audio_path=(Path(audio_root) / c.relpath) if backend.needs_audio else None)
            for c in pending
        ]
        cache = ResponseCache(cache_dir) if cache_dir is not None else None
        from agl.batch.hook import batch_session  # mode: batch (agl.batch); sync: a guard

        with batch_session(backend, requests, out_dir=out_dir, pred_path=pred_path, cache=cache,
                           prompt=prompt, fingerprint=fingerprint, price_in=price_in_per_m,
                           price_out=price_out_per_m, timeout_s=timeout_s,
                           concurrency=concurrency) as batch:
            requests = batch.requests
            source = batch.tag(stream(backend, requests, cache=cache, concurrency=concurrency,
                                      timeout_s=timeout_s, max_retries=max_retries,
                                      backoff=backoff), requests)
            asyncio.run(_run(backend, requests, source, pred_path, price_in_per_m,
                             price_out_per_m, fingerprint, prompt, progress, session))
    wall = time.perf_counter() - t0

    latest = {p.sample_id: p for p in iter_records(pred_path)} if pred_path.exists() else {}
    chosen = [latest[c.key] for c in selected if c.key in latest]
    summary = _summary(chosen, Status, len(selected), backend_name, model, settings, prompt,
                       fingerprint, price_in_per_m, price_out_per_m, wall, session)
    from agl.batch.hook import batch_summary

    summary = batch_summary(summary, chosen, settings, out_dir, batch.report if pending else None)
    # The tracked files hold what data, params and code decide (canonical order and floats);
    # latencies, attempts, cache hits and wall time go to a timings file DVC ignores.
    from agl.inference.finalize import write_canonical_run

    write_canonical_run(out_dir, pred_path, latest, [c.key for c in all_clips], summary)
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


async def _run(backend, requests, source, pred_path, price_in, price_out, fingerprint, prompt,
               progress, session) -> None:
    """Consume (index, reply) pairs from `source` into durable prediction records."""
    from agl.predictions.records import PredictionWriter, Status

    bar = _progress_bar(len(requests), backend, enabled=progress)
    tally = {"failures": 0, "spend": 0.0}
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
                tally["spend"] += pred.meta["cost_usd"]
            bar.set_postfix_str(f"failed={tally['failures']} spend=${tally['spend']:.4f}",
                                refresh=False)
            bar.update(len(batch))

    try:
        with PredictionWriter(pred_path) as writer:
            try:
                async for i, reply in source:
                    buffer.append(_prediction(requests[i].sample_id, reply, backend, prompt,
                                              fingerprint, price_in, price_out, secrets))
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


def _prediction(sid, reply, backend, prompt, fingerprint, price_in, price_out, secrets):
    """The durable record of one reply: non-finite numbers are missing values, and no
    field (reply text, reasoning, error, meta) carries a secret."""
    from agl.predictions.records import Prediction, without_non_finite

    pred = _raw_prediction(sid, reply, backend, prompt, fingerprint, price_in, price_out)
    pred = without_non_finite(pred)
    if secrets:
        pred = Prediction.from_json(scrub(pred.to_json(), secrets))
    return pred


def _raw_prediction(sid, reply, backend, prompt, fingerprint, price_in, price_out):
    from agl.predictions.parse import parse_reply
    from agl.predictions.records import Prediction, Status

    meta = {
        "backend": backend.name, "model": backend.model,
        "latency_s": reply.latency_s, "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens, "cost_usd": cost_usd(reply, price_in, price_out),
        "prompt": prompt.name, "prompt_sha256": prompt.sha256,
        "run_fingerprint": fingerprint, **reply.extra,
    }
    meta["attempts"] = reply.extra.get("attempts", 1)
    meta["cached"] = bool(reply.extra.get("cached", False))
    served = meta.pop("prediction", None)
    if served is not None:  # replay: a ready prediction, not text to parse
        return Prediction.from_json(served).with_meta(**meta)
    if reply.status is ReplyStatus.OK:
        try:
            return parse_reply(sid, reply.text, **meta)
        except Exception as exc:  # a parser bug on hostile text costs one clip, not the run
            return Prediction(sid, Status.UNPARSEABLE, raw_reply=reply.text,
                              error=f"reply could not be parsed ({type(exc).__name__}: "
                                    f"{str(exc)[:200]})",
                              missing=("latitude", "longitude", "city", "country", "continent"),
                              meta=meta)
    if reply.status is ReplyStatus.REFUSED:
        return Prediction(sid, Status.REFUSED, raw_reply=reply.text, refused=True,
                          missing=("latitude", "longitude", "city", "country", "continent"),
                          meta=meta)
    return Prediction(sid, Status.FAILED, error=reply.error, meta=meta)


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    s = sorted(values)
    return {"mean": statistics.fmean(s), "p50": statistics.median(s),
            "p95": s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))], "max": s[-1]}


def _summary(chosen, Status, n_selected, backend_name, model, settings, prompt, fingerprint,
             price_in, price_out, wall, session) -> dict[str, Any]:
    counts = {s.value: 0 for s in Status}
    for p in chosen:
        counts[p.status.value] += 1

    def total(field: str) -> float:
        return sum(float(p.meta.get(field) or 0) for p in chosen)

    fresh = [p for p in chosen if not p.meta.get("cached") and p.meta.get("latency_s") is not None]
    local = {k: _stats([float(p.meta[k]) for p in chosen if p.meta.get(k) is not None])
             for k in ("prefill_s", "decode_s", "tokens_per_s")}
    return {
        "backend": backend_name,
        "model": model,
        "settings": public_settings(settings),
        "prompt": prompt.name,
        "prompt_sha256": prompt.sha256,
        "prompt_source": str(prompt.source),
        "run_fingerprint": fingerprint,
        "price_in_per_m": price_in,
        "price_out_per_m": price_out,
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
    }


__all__ = [
    "Backoff", "complete", "complete_sync", "cost_usd", "run_inference", "stream",
    "run_fingerprint",
]
