"""The transports behind `agl.http.client`, built for either httpx family.

httpx and its drop-in fork httpx2 (which the openai SDK uses, and google-genai prefers) have
the same API but separate classes: a transport must subclass the family its client belongs
to, and its inner transport must use that family's httpcore. `family("httpx")` and
`family("httpx2")` build the same classes for each:

* `BoundedTransport` / `AsyncBoundedTransport`: wrap the family's own HTTP transport; per
  request they set the deadline (kept across redirects in the request's extensions), check
  the status line and headers (`agl.http.bounds.Checks`: redirect, encoding, declared length,
  HTML), and hand back a response whose body is metered (`agl.http.bounds.Meter`: capped after
  decoding, deadline checked between reads);
* a network backend around the connection pool's own, which cuts every socket operation's
  timeout to what is left of the request's deadline, so headers or a body trickling a byte
  at a time stop at the deadline (httpx's timeouts are per read).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import time
from types import SimpleNamespace
from typing import Any

from agl.http import bounds as http

# The running request's deadline (monotonic seconds), set by the transport around every
# read it drives; the network streams read it. Shared by both families.
DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("agl_deadline",
                                                                         default=None)
# The running request's transfer pace (agl.http.bounds.Pace): every socket read adds to
# it, so a transfer trickling under the floor stops (headers and body alike).
PACE: contextvars.ContextVar[http.Pace | None] = contextvars.ContextVar("agl_pace", default=None)


# Requests whose first byte left for a server, counted for whoever set a counter (the model
# runner, per attempt: agl.inference.runner): an attempt that timed out before any byte left
# (connecting, or building the request under load) sent nothing, whatever the SDK says.
WIRE: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("agl_wire", default=None)
# The running request's own flag: has its first byte been written?
_WROTE: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("agl_wrote", default=None)


def _on_wire() -> None:
    wrote = _WROTE.get()
    if wrote is None or wrote[0]:
        return
    wrote[0] = True
    counter = WIRE.get()
    if counter is not None:
        counter[0] += 1


@contextlib.contextmanager
def _one_request():
    token = _WROTE.set([False])
    try:
        yield
    finally:
        _WROTE.reset(token)


def _paced(data: bytes, timeout: type[Exception]) -> bytes:
    pace = PACE.get()
    if pace is not None:
        pace.add(len(data), timeout)
    return data


@functools.cache
def family(name: str = "httpx") -> SimpleNamespace:
    """The bounded transports for httpx (`name="httpx"`) or httpx2, built once."""
    hx = importlib.import_module(name)
    hc = importlib.import_module("httpcore" if name == "httpx" else "httpcore2")
    left = _deadline_left(hc)
    sync_backend, async_backend = _sync_network(hc, left), _async_network(hc, left)
    return SimpleNamespace(hx=hx, BoundedTransport=_sync_transport(name, hx, sync_backend),
                           AsyncBoundedTransport=_async_transport(name, hx, async_backend),
                           proxy_mounts=functools.partial(_proxy_mounts, name))


def _deadline_left(hc):
    """`left(timeout)`: a socket operation's timeout cut to what is left of the deadline."""

    def left(timeout: float | None) -> float | None:
        deadline = DEADLINE.get()
        if deadline is None:
            return timeout
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise hc.ReadTimeout("the request's deadline has passed")
        return remaining if timeout is None else min(timeout, remaining)

    return left


def _sync_network(hc, left):
    """The family's network backend, every socket operation bounded by `left`."""

    class Stream(hc.NetworkStream):
        def __init__(self, inner):
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return _paced(self._inner.read(max_bytes, left(timeout)), hc.ReadTimeout)

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            _on_wire()  # before: a write cut half-way may still have reached the server
            self._inner.write(buffer, left(timeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return Stream(self._inner.start_tls(ssl_context, server_hostname, left(timeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(hc.NetworkBackend):
        def __init__(self, inner):
            self._inner = inner

        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            return Stream(self._inner.connect_tcp(host, port, left(timeout), local_address,
                                                  socket_options))

        def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return Stream(self._inner.connect_unix_socket(path, left(timeout), socket_options))

        def sleep(self, seconds: float) -> None:
            self._inner.sleep(seconds)

    return Backend


def _async_network(hc, left):
    """The asyncio twin of `_sync_network`."""

    class AsyncStream(hc.AsyncNetworkStream):
        def __init__(self, inner):
            self._inner = inner

        async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return _paced(await self._inner.read(max_bytes, left(timeout)), hc.ReadTimeout)

        async def write(self, buffer: bytes, timeout: float | None = None) -> None:
            _on_wire()  # before: a write cut half-way may still have reached the server
            await self._inner.write(buffer, left(timeout))

        async def aclose(self) -> None:
            await self._inner.aclose()

        async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return AsyncStream(await self._inner.start_tls(ssl_context, server_hostname,
                                                           left(timeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class AsyncBackend(hc.AsyncNetworkBackend):
        def __init__(self, inner):
            self._inner = inner

        async def connect_tcp(self, host, port, timeout=None, local_address=None,
                              socket_options=None):
            return AsyncStream(await self._inner.connect_tcp(host, port, left(timeout),
                                                             local_address, socket_options))

        async def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return AsyncStream(await self._inner.connect_unix_socket(path, left(timeout),
                                                                     socket_options))

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return AsyncBackend


def _deadline_aware(name: str, transport, wrap):
    """`transport` with its connection pool's network backend wrapped. httpx takes no
    network backend of its own, so this reaches into the pool; a test
    (tests/test_network_bounds.py) fails if a new httpx or httpcore moves it."""
    pool = getattr(transport, "_pool", None)
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError(f"agl.http.transport: {name}'s internals changed (no "
                           "_pool._network_backend); the deadline cannot reach the socket")
    pool._network_backend = wrap(pool._network_backend)
    return transport


@contextlib.contextmanager
def _reading(hx, checks, request):
    """Drive one read under the request's deadline; a timeout past the deadline becomes the
    deadline's own refusal (one line naming the URL and the limit)."""
    token, pace = DEADLINE.set(checks.deadline), PACE.set(checks.pace)
    try:
        yield
    except hx.TimeoutException:
        if checks.pace.stalled:
            raise http.stall_refusal(request.url, checks.limits, checks.pace) from None
        if checks.deadline is not None and time.monotonic() >= checks.deadline - 0.05:
            raise http.deadline_refusal(request.url, checks.limits) from None
        raise
    finally:
        PACE.reset(pace)
        DEADLINE.reset(token)


def _respond(hx, response, checks, stream):
    headers = response.headers
    if checks.decoding:  # decoded by the meter: httpx must not decode again
        headers = hx.Headers([(k, v) for k, v in response.headers.multi_items()
                              if k.lower() not in ("content-encoding", "content-length")])
    return hx.Response(response.status_code, headers=headers, stream=stream,
                       extensions=response.extensions)


def _sync_transport(name: str, hx, backend):
    class SyncBody(hx.SyncByteStream):
        def __init__(self, response, meter, checks, request):
            self.response, self.meter, self.checks, self.request = response, meter, checks, request

        def __iter__(self):
            raw = iter(self.response.stream)
            while True:
                with _reading(hx, self.checks, self.request):
                    chunk = next(raw, None)
                if chunk is None:
                    break
                yield from self.meter.pieces(chunk)
            yield from self.meter.end()

        def close(self) -> None:
            self.response.close()

    class BoundedTransport(hx.BaseTransport):
        """A transport enforcing `agl.http.client.Limits` (see agl.http.client)."""

        def __init__(self, limits, *, refuse_html=False, cap_for=None, max_connections=100,
                     proxy=None):
            self.limits, self.refuse_html, self.cap_for = limits, refuse_html, cap_for
            self.inner = _deadline_aware(name, hx.HTTPTransport(
                retries=0, proxy=proxy, limits=hx.Limits(max_connections=max_connections)), backend)

        def handle_request(self, request):
            checks = http.Checks(self, request)
            with _reading(hx, checks, request), _one_request():
                response = self.inner.handle_request(request)
            try:
                meter = checks.head(response.status_code, response.headers)
            except BaseException:
                response.close()
                raise
            return _respond(hx, response, checks, SyncBody(response, meter, checks, request))

        def close(self) -> None:
            self.inner.close()

    return BoundedTransport


def _async_transport(name: str, hx, backend):
    class AsyncBody(hx.AsyncByteStream):
        def __init__(self, response, meter, checks, request):
            self.response, self.meter, self.checks, self.request = response, meter, checks, request

        async def __aiter__(self):
            raw = self.response.stream.__aiter__()
            while True:
                try:
                    with _reading(hx, self.checks, self.request):
                        chunk = await raw.__anext__()
                except StopAsyncIteration:
                    break
                for piece in self.meter.pieces(chunk):
                    yield piece
            for piece in self.meter.end():
                yield piece

        async def aclose(self) -> None:
            await self.response.aclose()

    class AsyncBoundedTransport(hx.AsyncBaseTransport):
        """The asyncio twin of `BoundedTransport` (the model SDKs' clients)."""

        def __init__(self, limits, *, refuse_html=False, cap_for=None, proxy=None):
            self.limits, self.refuse_html, self.cap_for = limits, refuse_html, cap_for
            self.inner = _deadline_aware(name, hx.AsyncHTTPTransport(retries=0, proxy=proxy), backend)

        async def handle_async_request(self, request):
            checks = http.Checks(self, request)
            with _reading(hx, checks, request), _one_request():
                response = await self.inner.handle_async_request(request)
            try:
                meter = checks.head(response.status_code, response.headers)
            except BaseException:
                await response.aclose()
                raise
            return _respond(hx, response, checks, AsyncBody(response, meter, checks, request))

        async def aclose(self) -> None:
            await self.inner.aclose()

    return AsyncBoundedTransport


def _proxy_mounts(name: str, make) -> dict[str, Any]:
    """Transports for the environment's proxies (HTTP(S)_PROXY, NO_PROXY), each bounded:
    an explicit transport turns httpx's own reading of the environment off."""
    try:  # no public equivalent in either family
        get = importlib.import_module(f"{name}._utils").get_environment_proxies
    except (ImportError, AttributeError):  # pragma: no cover - a future httpx
        return {}
    return {pattern: make(proxy) for pattern, proxy in get().items()}
