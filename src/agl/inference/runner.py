"""The runner: many requests through one backend, concurrently, cached and retried.

Entry points:

* `complete(backend, requests, ...)`: requests in, replies out (in request order). Judges and
  other text-only callers use it, or `complete_sync(backend_name, model, requests, ...)`
  (`agl.inference.runner_sync`).
* `stream(backend, requests, ...)`: (index, reply) pairs as they arrive; the `local` executor
  (`agl.inference.executors.local`) hands them to a model run's driver.

Why the pieces are here and not in backends: a backend makes one call. Concurrency (an
asyncio.Semaphore per backend), the request timeout, retries with exponential backoff and
full jitter on retryable `BackendError`s (429 / RESOURCE_EXHAUSTED / 5xx / timeouts, honouring
`retry_after`), and the response cache are the same for every service, so they are written
once. A call that still fails becomes `Reply(status=FAILED, error=...)`, never text.

A model the provider says is gone (`BackendError.gone`: 404 model_not_found, Gemini's
NOT_FOUND) is not a clip's failure but the run's: `ModelGone` is raised, never retried, and
the run stops. The first request of an API backend's stream goes alone (`probe_first`), so a retired model costs one
request, not `concurrency` of them. A server that no request of the run could connect to
(`offline_after` failures to connect, none reached it) stops the run too: `NoNetwork`
(agl.core.reach), one line naming the host, in seconds rather than hours of retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend, BackendError
from agl.contracts.calls import ATTEMPT, Attempt, Reply, ReplyStatus, Request
from agl.core.audio import probe
from agl.core.reach import OFFLINE_AFTER, Reach
from agl.core.retry import MAX_BATCH_BYTES, MAX_REPLY_BYTES, RETRY_AFTER_CAP_S
from agl.core.secrets import known_secrets, scrub
from agl.errors import AglError, ModelGone
from agl.executor.config import ExecutorConfig
from agl.http.transport import WIRE
from agl.inference.cache import ResponseCache, cache_key
from agl.inference.spend import SPEND, reply_cost

PROBE_SECONDS = 1.0  # how much of each clip must decode before it is sent
# The stream's reachability (agl.core.reach), read by each attempt; None: not watched.
REACH: contextvars.ContextVar[Reach | None] = contextvars.ContextVar("agl_reach", default=None)


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
    retry_after_cap_s: float = RETRY_AFTER_CAP_S

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (the server's Retry-After if given)."""
        if retry_after is not None and retry_after >= 0:
            return retry_after * (1 + 0.1 * random.random())
        return random.uniform(0, min(self.cap_s, self.base_s * 2**attempt))


@dataclass(frozen=True)
class RunOptions:
    """How requests are sent and shown: the cache, concurrency, per-request timeout, retries
    and backoff, and a progress bar on stderr. `limit` (the first N clips of the manifest)
    is `agl.inference.model_run.run_inference`'s alone."""

    cache_dir: Path | None = None  # the response cache folder; None: no cache
    concurrency: int = 4
    timeout_s: float = 120.0
    max_retries: int = 5
    backoff: Backoff = Backoff()
    progress: bool = True
    limit: int | None = None
    # The largest reply body (and batch status / result file) an HTTP backend reads:
    # agl.http.client refuses more while it streams (params.yaml infer.max_reply_bytes).
    max_reply_bytes: int = MAX_REPLY_BYTES
    max_batch_bytes: int = MAX_BATCH_BYTES
    # Which executor carries the requests (params.yaml `executor:`): transport, never part of
    # a record, a fingerprint or a cache key.
    transport: ExecutorConfig = ExecutorConfig()
    # Which repeat of the run this is (params.yaml infer.repeats; 0: the run itself): in
    # every request's cache key and in the run's fingerprint, so repeats never share answers.
    repeat: int = 0
    # Failures to connect, none reaching the server, that stop the run (params.yaml
    # infer.offline_after; agl.core.reach).
    offline_after: int = OFFLINE_AFTER
    # Send each clip's file with its container tags (the `tags` intervention; a `paper`
    # protocol entry always does): in every request, its cache key and the run's fingerprint.
    send_tags: bool = False
    # params.yaml infer.max_spend_usd: stop sending before this run's spend would pass it
    # (agl.inference.spend); None: no cap.
    max_spend_usd: float | None = None
    # params.yaml infer.max_total_spend_usd: stop sending before the spend the build's records
    # hold (under `spend_roots`, read before the run sends) plus this run's would pass it.
    max_total_spend_usd: float | None = None
    spend_roots: tuple[str, ...] = ()

    def bound(self, backend: Backend) -> Backend:
        """`backend` with these reply caps (read when its SDK client is first made)."""
        backend.max_reply_bytes = int(self.max_reply_bytes)
        backend.max_batch_bytes = int(self.max_batch_bytes)
        return backend


def hash_audio(request: Request) -> Request:
    """`request` with its audio's SHA-256 (the cache key's), read in 1 MiB blocks."""
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
    """One request to its final reply. `extra` gains `attempts` and `cached`. Under a spend
    cap (agl.inference.spend.SPEND), a request that would pass it is not sent (a not-asked
    FAILED reply).

    Every reply is scrubbed of the secrets the process knows before anything stores it
    (cache, predictions): a server may echo a key in its reply text as well as its errors."""
    secrets = known_secrets(backend.settings)
    key = None
    if cache is not None and backend.deterministic:
        found = await _from_cache(backend, request, cache, secrets)
        if isinstance(found, Reply):
            return found
        request, key = found
    if request.audio_path is not None:
        # Probed before the first request (after a cache hit, which a probed clip earned):
        # a model given a zero-byte, text or undecodable file invents an answer for it. The
        # first PROBE_SECONDS must decode: milliseconds, so requests (and a local backend's
        # batches) are not delayed; a clip cut short later is the download's and the
        # filter's to catch (they decode whole files against the manifest's mp3seconds).
        got = await asyncio.to_thread(probe, request.audio_path, PROBE_SECONDS)
        if not got.ok:
            return Reply(ReplyStatus.FAILED, error=f"unusable audio, not requested: {got.reason}",
                         extra={"attempts": 0, "cached": False})
    held, spend = 0.0, SPEND.get()
    if spend is not None:
        got = spend.hold(request)
        if isinstance(got, Reply):
            return got
        held = got
    reply = Reply(ReplyStatus.FAILED)  # cancelled before a reply: no cost known
    try:
        reply = await _attempts(backend, request, semaphore, timeout_s, max_retries, backoff,
                                (cache, key, secrets))
        return reply
    finally:
        if spend is not None:
            spend.settle(held, reply)


async def _attempts(backend: Backend, request: Request, semaphore: asyncio.Semaphore,
                    timeout_s: float, max_retries: int, backoff: Backoff,
                    store: tuple[ResponseCache | None, str | None, list[str]]) -> Reply:
    """The attempts at one request until a reply, or the retries are spent."""
    cache, key, secrets = store
    attempt = sent = unsent = 0  # the runner's attempts; the requests they sent (a record's
    # `attempts`); the attempts whose request never left this machine (never a request)
    while True:
        attempt += 1
        reply, error, retryable, retry_after, latency, requests = await _attempt(
            backend, request, semaphore, timeout_s)
        sent += requests
        if reply is None and backend.over_http and requests == 0:
            # A timeout while connecting or building the request (at load): not the server's
            # 429, 500 or timeout, and no request to it.
            unsent += 1
            error = f"{error}, before the request left this machine (never sent; not the server's answer)"
        if reply is not None:
            reply = scrub_reply(reply, secrets)
        error = scrub(error, secrets)
        extra = {"attempts": sent, "cached": False, **({"unsent_attempts": unsent} if unsent else {})}
        if reply is not None and reply.status is not ReplyStatus.FAILED:
            return await _answered(reply, sent, latency, cache, key)
        if reply is not None:  # the backend returned FAILED itself: not retried
            return replace(reply, extra={**reply.extra, **extra})
        if not retryable or attempt > max_retries:
            if retryable:
                error = (f"{error} (gave up after {attempt} attempts"
                         + (f"; {unsent} never sent, {sent} request(s) sent)" if unsent else ")"))
            return Reply(ReplyStatus.FAILED, error=error, latency_s=latency, extra=extra)
        if retry_after is not None and retry_after > backoff.retry_after_cap_s:
            return Reply(ReplyStatus.FAILED, latency_s=latency,
                         error=f"{error}; the server asked to wait {retry_after:g} s "
                               f"(Retry-After), more than retry_after_cap_s "
                               f"{backoff.retry_after_cap_s:g} s; rerun later to retry",
                         extra=extra)
        await asyncio.sleep(backoff.delay(attempt - 1, retry_after))


async def _from_cache(backend: Backend, request: Request, cache: ResponseCache,
                      secrets: list[str]) -> Reply | tuple[Request, str]:
    """The cached reply (or a FAILED one for unreadable audio), else the request with its
    audio hashed and its cache key."""
    if request.audio_path is not None and not request.audio_sha256:
        try:
            request = await asyncio.to_thread(hash_audio, request)
        except OSError as exc:
            return Reply(ReplyStatus.FAILED, error=f"cannot read audio: {exc}",
                         extra={"attempts": 0, "cached": False})
    key = cache_key(backend.name, backend.model, backend.settings, request)
    hit = cache.get(key)
    if hit is not None:  # scrubbed again: an entry may predate a key's rotation
        hit = scrub_reply(hit, secrets)
        return replace(hit, extra={**hit.extra, "attempts": 0, "cached": True})
    return request, key


async def lookup(backend: Backend, request: Request, cache: ResponseCache | None) -> Reply | None:
    """The cached reply for `request` (as the runner would serve it), else None: how a
    driver leaves out what the cache answers before it hands the rest to shards."""
    if cache is None or not backend.deterministic:
        return None
    found = await _from_cache(backend, request, cache, known_secrets(backend.settings))
    return found if isinstance(found, Reply) and found.extra.get("cached") else None


async def remember(backend: Backend, request: Request, reply: Reply, cache: ResponseCache | None) -> None:
    """Cache `reply` (one answered elsewhere, by a shard) exactly as the runner caches its own."""
    if cache is None or not backend.deterministic or reply.status is ReplyStatus.FAILED:
        return
    if reply.extra.get("cached"):
        return
    await _answered(reply, int(reply.extra.get("attempts", 1)), reply.latency_s or 0.0, cache,
                    cache_key(backend.name, backend.model, backend.settings, await asyncio.to_thread(
                        hash_audio, request)))


async def _attempt(backend: Backend, request: Request, semaphore: asyncio.Semaphore,
                   timeout_s: float) -> tuple[Reply | None, str | None, bool, float | None, float, int]:
    """One call under the semaphore and the timeout: (reply, error, retryable, retry_after,
    latency, requests sent); a raised error is caught and described, never raised. A backend
    that queues (a replica pool) pauses the timeout while the call waits for an endpoint and
    counts the requests it sends (agl.contracts.calls.Attempt); any other sends one."""
    retry_after: float | None = None
    state = Attempt()
    wire = [0]  # requests whose first byte left for a server (agl.http.transport.WIRE)
    async with semaphore:
        t0 = time.perf_counter()
        token, wire_token = ATTEMPT.set(state), WIRE.set(wire)
        try:
            # A long clip's window is cut here, under the semaphore: at most `concurrency`
            # window files exist at once, each only for its call (agl.inference.windowed).
            async with _heard(request) as sent_request:
                async with asyncio.timeout(timeout_s) as state.deadline:  # no extra task, unlike wait_for
                    reply = await backend.generate(sent_request)
            error, retryable = None, False
            _reached()
        except TimeoutError:
            reply, error, retryable = None, f"timed out after {timeout_s:g} s", True
        except BackendError as exc:
            _failed(exc)  # a run that reaches no server stops here (NoNetwork)
            if exc.gone:  # the run's end, not the clip's: never retried, never recorded
                msg = scrub(str(exc), known_secrets(backend.settings))
                raise ModelGone(f"{backend.name}:{backend.model} is gone: {msg}",
                                model=backend.model, provider_message=msg) from None
            reply, error, retryable = None, str(exc), exc.retryable
            retry_after = exc.retry_after
        except Exception as exc:  # a bug or an SDK surprise: recorded, never raised
            reply, error, retryable = None, f"{type(exc).__name__}: {exc}", False
        finally:
            ATTEMPT.reset(token)
            WIRE.reset(wire_token)
        latency = time.perf_counter() - t0
    if backend.over_http:  # what left for a server, not what the backend or SDK was handed
        return reply, error, retryable, retry_after, latency, wire[0] if reply is None else max(wire[0], 1)
    return reply, error, retryable, retry_after, latency, 1 if state.sent is None else state.sent


def _heard(request: Request) -> Any:
    """The request as sent: a window cut into its own WAV for the call, else itself."""
    if request.window is None:
        return contextlib.nullcontext(request)
    from agl.inference.windowed import heard  # numpy and soundfile: only for windows

    return heard(request)


def _reached() -> None:
    reach = REACH.get()
    if reach is not None:
        reach.connected()


def _failed(exc: BaseException) -> None:
    """A failure to connect counts toward NoNetwork; any other error came from a server."""
    reach = REACH.get()
    if reach is not None:
        reach.failed(exc)


async def _answered(reply: Reply, attempt: int, latency: float, cache: ResponseCache | None,
                    key: str | None) -> Reply:
    """A successful reply with its latency and attempts, cached when it has an answer."""
    reply = replace(
        reply,
        latency_s=reply.latency_s if reply.latency_s is not None else latency,
        extra={**reply.extra, "attempts": attempt, "cached": False},
    )
    # An answer without text is recorded (the parser calls it unparseable) but never
    # cached: a rerun asks again rather than replaying an empty reply for ever.
    if key is not None and cache is not None and (
            (reply.text or "").strip() or reply.extra.get("prediction") is not None):
        await asyncio.to_thread(cache.put, key, reply)  # its fsync off the loop
    return reply


def scrub_reply(reply: Reply, secrets: list[str]) -> Reply:
    """`reply` without any of `secrets` in its text, error or extra fields."""
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
    offline_after: int = OFFLINE_AFTER,
) -> AsyncIterator[tuple[int, Reply]]:
    """(index, reply) pairs in the order replies arrive, at most `concurrency` in flight;
    `offline_after` failures to connect before any request reached the server stop it
    (agl.core.reach.NoNetwork)."""
    if concurrency < 1:
        raise AglError(f"concurrency must be at least 1, got {concurrency}")
    semaphore = asyncio.Semaphore(concurrency)
    REACH.set(Reach("the API", offline_after, "infer.offline_after"))  # copied into each task

    async def one(i: int, r: Request) -> tuple[int, Reply]:
        return i, await _call(backend, r, cache=cache, semaphore=semaphore, timeout_s=timeout_s,
                              max_retries=max_retries, backoff=backoff)

    # An API model's first request goes alone: a retired model (ModelGone) is known after
    # one request (a local model's first batch stays whole: Backend.probe_first).
    # A reply from the cache (or a clip never sent) tells nothing of the model: the probe is
    # the first request that reached a server (with the first clip cached, a retired model
    # used to get every pending clip at once).
    first = 0
    while getattr(backend, "probe_first", False) and first < len(requests):
        got = await one(first, requests[first])
        first += 1
        yield got
        if int(got[1].extra.get("attempts", 1) or 0) >= 1:
            break
    # Tasks beyond the semaphore wait cheaply; creating them all keeps the pipe full.
    tasks = [asyncio.ensure_future(one(i, r)) for i, r in enumerate(requests) if i >= first]
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
    bar = progress_bar(len(requests), backend, enabled=progress)
    failures = 0
    async for i, reply in stream(backend, requests, cache=cache, concurrency=concurrency,
                                 timeout_s=timeout_s, max_retries=max_retries, backoff=backoff):
        out[i] = reply
        failures += reply.status is ReplyStatus.FAILED
        bar.set_postfix_str(f"failed={failures}", refresh=False)
        bar.update(1)
    bar.close()
    return [r for r in out if r is not None]


def cost_usd(reply: Reply, price_in_per_m: float, price_out_per_m: float,
             price_audio_in_per_m: float | None = None) -> float:
    """What a reply costs at the given prices per million tokens, cached or not: a record
    must not depend on run history (what this session paid is `session_cost_usd`). With an
    audio price, the reply's `audio_tokens` (the provider's own count) are billed at it and
    the rest of its input at `price_in_per_m`."""
    return reply_cost(reply, price_in_per_m, price_out_per_m, price_audio_in_per_m)


def progress_bar(total: int, backend: Backend, *, enabled: bool):
    """A tqdm bar on stderr named `backend:model` (disabled: draws nothing)."""
    from tqdm import tqdm  # a third-party import only the callers that show progress pay for

    return tqdm(total=total, desc=f"{backend.name}:{backend.model}", unit="req",
                file=sys.stderr, disable=not enabled, dynamic_ncols=True)


__all__ = ["Backoff", "RunOptions", "complete", "cost_usd", "lookup", "progress_bar", "remember",
           "stream"]
