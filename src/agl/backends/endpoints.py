"""Many replicas of one model: a pool of OpenAI-compatible endpoints (e.g. vLLM servers).

`openai-compatible` takes `base_url` as a list; each entry is a URL or `{url, concurrency}`
(`endpoint_concurrency` is the default per endpoint). Each call goes to the least-loaded
healthy endpoint (fewest requests in flight for its capacity). An endpoint that refuses the
connection, times out, answers 5xx / 429 or answers 200 with something that is no
completion (an HTML page, not JSON, past the reply size cap) is backed off (exponential, `endpoint_backoff_s`
doubling per consecutive failure, capped at `endpoint_backoff_cap_s`) and the call is retried
at once on another one; only when every endpoint failed this call does the error go back to
the runner (which retries after its own backoff). A success resets the endpoint's backoff.

A backed-off endpoint delays the calls queued behind it, and only delays them: the wait is
no part of their request timeout (the runner's deadline is paused while a call waits for an
endpoint, agl.contracts.calls.Attempt) and no request of theirs (the pool counts the requests
it sends, which is what the run's summary counts); only the call that met the 429 or 5xx
carries it.

Nothing is asked twice for an answered clip: a call is retried only after its attempt failed,
and the runner never re-asks a clip that has a recorded answer. The pool counts requests,
failures and latency per endpoint (`report()`); the latency figures are timings, so the infer
stage writes them outside DVC's outputs (see `agl.inference.params_run.run_spec`).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agl.backends.service import UnreadableReply
from agl.contracts.calls import ATTEMPT
from agl.core.checks import number_setting
from agl.core.secrets import strip_url_credentials
from agl.errors import AglError
from agl.http.client import Refused

T = TypeVar("T")


@dataclass
class Endpoint:
    url: str
    capacity: int
    client: Any = None
    in_flight: int = 0
    failures_in_a_row: int = 0
    backed_off_until: float = 0.0
    requests: int = 0
    failures: int = 0
    latencies: list[float] = field(default_factory=list)

    def healthy(self, now: float) -> bool:
        return now >= self.backed_off_until


def parse_endpoints(base_url: Any, default_concurrency: int) -> list[tuple[str, int]]:
    """`base_url` (a URL, or a list of URLs / {url, concurrency}) as (url, concurrency) pairs."""
    entries = base_url if isinstance(base_url, list) else [base_url]
    out: list[tuple[str, int]] = []
    for i, e in enumerate(entries):
        if isinstance(e, str) and e:
            url, conc = e, default_concurrency
        elif isinstance(e, dict) and isinstance(e.get("url"), str) and e["url"]:
            url, conc = e["url"], e.get("concurrency", default_concurrency)
        else:
            raise AglError(f"base_url[{i}]: expected a URL or {{url, concurrency}}, got {e!r}")
        try:
            conc = int(conc)
        except (TypeError, ValueError):
            raise AglError(f"base_url[{i}].concurrency: expected a whole number") from None
        if conc < 1:
            raise AglError(f"base_url[{i}].concurrency: must be at least 1")
        if url in (u for u, _ in out):
            raise AglError(f"base_url[{i}]: {url} is listed twice")
        out.append((url, conc))
    if not out:
        raise AglError("base_url: the list of endpoints is empty")
    return out


class EndpointPool:
    """Least-loaded routing with per-endpoint capacity and backoff. `call(fn)` runs
    `fn(endpoint)`; `is_endpoint_failure(exc)` says whether an exception means the endpoint
    (not the request) is at fault, so another endpoint may answer it."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        *,
        is_endpoint_failure: Callable[[BaseException], bool],
        backoff_s: float = 1.0,
        backoff_cap_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not endpoints:
            raise AglError("an endpoint pool needs at least one endpoint")
        self.endpoints = endpoints
        self.is_endpoint_failure = is_endpoint_failure
        self.backoff_s, self.backoff_cap_s = backoff_s, backoff_cap_s
        self.clock = clock
        self._changed: asyncio.Condition | None = None

    @property
    def capacity(self) -> int:
        return sum(e.capacity for e in self.endpoints)

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:  # bound to the running loop on first use
            self._changed = asyncio.Condition()
        return self._changed

    def _pick(self, exclude: set[str]) -> Endpoint | None:
        now = self.clock()
        free = [e for e in self.endpoints if e.url not in exclude and e.healthy(now) and e.in_flight < e.capacity]
        if not free:
            return None
        return min(free, key=lambda e: (e.in_flight / e.capacity, e.in_flight))

    def _wait_s(self, exclude: set[str], failed: bool) -> float | None:
        """How long until an endpoint not yet tried could take the call; None: give up (none
        left, or after a failure only backed-off ones: the runner's backoff takes over)."""
        now = self.clock()
        left = [e for e in self.endpoints if e.url not in exclude]
        if not left:
            return None
        if any(e.healthy(now) for e in left):
            return 1.0  # all busy: woken by a release long before this
        return None if failed else min(e.backed_off_until for e in left) - now

    async def _acquire(self, exclude: set[str], failed: bool = False) -> Endpoint | None:
        cond = self._condition()
        async with cond:
            while True:
                ep = self._pick(exclude)
                if ep is not None:
                    ep.in_flight += 1
                    return ep
                wait = self._wait_s(exclude, failed)
                if wait is None:
                    return None
                try:
                    await asyncio.wait_for(cond.wait(), timeout=max(wait, 0.001))
                except TimeoutError:
                    pass

    async def _release(self, ep: Endpoint, *, ok: bool, down: bool, latency: float) -> None:
        ep.in_flight -= 1
        ep.requests += 1
        ep.latencies.append(latency)
        if ok:
            ep.failures_in_a_row = 0
        else:
            ep.failures += 1
        if down:
            ep.failures_in_a_row += 1
            wait = min(self.backoff_cap_s, self.backoff_s * 2 ** (ep.failures_in_a_row - 1))
            ep.backed_off_until = self.clock() + wait
        cond = self._condition()
        async with cond:
            cond.notify_all()

    async def call(self, fn: Callable[[Endpoint], Awaitable[T]]) -> T:
        """`fn` on the least-loaded healthy endpoint; on an endpoint failure, again on one not
        yet tried by this call. The last endpoint failure is raised when none is left."""
        tried: set[str] = set()
        last: BaseException | None = None
        attempt = ATTEMPT.get()
        while True:
            # Waiting here (every endpoint busy or backed off, e.g. after another clip's
            # 429) is queueing, not sending: the runner's deadline is paused meanwhile.
            with attempt.queued() if attempt is not None else contextlib.nullcontext():
                ep = await self._acquire(tried, last is not None)
            if ep is None:
                assert last is not None
                raise last
            tried.add(ep.url)
            if attempt is not None:
                attempt.sending()  # the run's request count is what the servers received
            t0 = self.clock()
            try:
                result = await fn(ep)
            except asyncio.CancelledError:
                # The runner's timeout: the endpoint did not answer in time.
                await asyncio.shield(self._release(ep, ok=False, down=True, latency=self.clock() - t0))
                raise
            except Exception as exc:
                down = self.is_endpoint_failure(exc)
                await self._release(ep, ok=False, down=down, latency=self.clock() - t0)
                if not down:
                    raise
                last = exc
                continue
            await self._release(ep, ok=True, down=False, latency=self.clock() - t0)
            return result

    def report(self) -> list[dict[str, Any]]:
        """Per endpoint: url (without credentials), concurrency, requests, failures, latency
        (mean/p50/p95/max s). It goes to telemetry and the printed summary."""
        out = []
        for e in self.endpoints:
            s = sorted(e.latencies)
            lat = (
                {
                    "mean": round(statistics.fmean(s), 4),
                    "p50": round(statistics.median(s), 4),
                    "p95": round(s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))], 4),
                    "max": round(s[-1], 4),
                }
                if s
                else None
            )
            out.append(
                {
                    "url": strip_url_credentials(e.url),
                    "concurrency": e.capacity,
                    "requests": e.requests,
                    "failures": e.failures,
                    "latency_s": lat,
                }
            )
        return out


def _openai_endpoint_failure(exc: BaseException) -> bool:
    """Connection refused/reset, timeouts, 5xx and 429, and a 200 that is no completion (an
    HTML page, not JSON, no choices, a reply past the size cap): the endpoint's fault, try
    another."""
    import json

    import openai


    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code == 429
    return isinstance(exc, openai.APITimeoutError | openai.APIConnectionError | UnreadableReply
                      | Refused | json.JSONDecodeError | openai.APIResponseValidationError)


class _PooledCompletions:
    def __init__(self, pool: EndpointPool):
        self._pool = pool

    async def create(self, **kw: Any) -> Any:
        async def one(ep: Endpoint) -> Any:
            resp = await ep.client.chat.completions.create(**kw)
            if not getattr(resp, "choices", None):  # the SDK hands a non-JSON body back as text
                raise UnreadableReply(f"{ep.url} answered with no completion: "
                                      f"{str(resp)[:200]!r}")
            return resp

        return await self._pool.call(one)


class _PooledChat:
    def __init__(self, pool: EndpointPool):
        self.completions = _PooledCompletions(pool)


class PooledClient:
    """What `OpenAIChat.generate` uses of `AsyncOpenAI` (`chat.completions.create`,
    `close`), spread over a pool: the backend's request shapes stay in one place."""

    def __init__(self, pool: EndpointPool):
        self._pool = pool
        self.chat = _PooledChat(pool)

    async def close(self) -> None:
        for e in self._pool.endpoints:
            await e.client.close()


def pooled_client(settings: dict[str, Any], api_key: str,
                  http_client: Callable[[], Any] | None = None,
                  ) -> tuple[EndpointPool, PooledClient]:
    """A pool of AsyncOpenAI clients (SDK retries off: the pool and the runner retry) for
    `settings["base_url"]` as a list, and the client facade over it. `http_client()`: each
    endpoint's own httpx client (with its bounded transport)."""
    from openai import AsyncOpenAI

    try:
        default = int(settings.get("endpoint_concurrency", 4))
        backoff = float(settings.get("endpoint_backoff_s", 1.0))
        cap = float(settings.get("endpoint_backoff_cap_s", 30.0))
    except (TypeError, ValueError) as exc:
        raise AglError(f"openai-compatible: endpoint settings: {exc}") from None
    endpoints = [
        Endpoint(url, conc, client=AsyncOpenAI(
            api_key=api_key, base_url=url, max_retries=0,
            http_client=http_client() if http_client else None))
        for url, conc in parse_endpoints(settings["base_url"], default)
    ]
    pool = EndpointPool(endpoints, is_endpoint_failure=_openai_endpoint_failure, backoff_s=backoff, backoff_cap_s=cap)
    return pool, PooledClient(pool)


def pool_capacity(settings: dict[str, Any]) -> int | None:
    """The total concurrency of a replica list (what the runner should allow in flight)."""
    base = settings.get("base_url")
    if not isinstance(base, list):
        return None
    default = number_setting(settings, "endpoint_concurrency", 4, "count", "openai-compatible setting")
    return sum(c for _, c in parse_endpoints(base, int(default)))
