"""A small HTTP/1.1 server on asyncio: the game's connection layer, bounded in time and count.

Why not the standard library's ThreadingHTTPServer: it spends a thread per connection and
bounds each *read* by the socket timeout, so a client trickling its headers one byte every
few seconds holds a thread forever, and its listen backlog of 5 makes 200 simultaneous
clients wait for SYN retransmissions (tens of seconds). Here:

- connections are coroutines on one event loop (an idle one costs a few KiB, not a thread),
  at most `max_connections` at once (more are answered 503 and closed), with a listen
  backlog of `BACKLOG`;
- each request must arrive *complete* — request line, headers and body — within
  `idle_timeout_s` of the connection being ready for it (a total deadline, not per read), or
  the connection is closed without an answer; every write must drain within the same limit;
- the application (`handler`: Request -> Response, synchronous) runs on a bounded pool of
  `workers` threads; requests wait in the pool's queue, at most one per connection;
- malformed framing gets a 4xx JSON `{"error": ...}` and the connection is closed: a request
  line that is not `METHOD /target HTTP/1.x`, lines over `LINE_LIMIT`, more than
  `MAX_HEADERS` headers, `Transfer-Encoding`, a `Content-Length` that is not ASCII digits or
  given twice, a body over `max_body_bytes`, an `Expect` other than `100-continue`.
A body cut short by the client is never handed to the application.
"""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import io
import re
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import BinaryIO

from agl.core.jsonutil import dumps

BACKLOG = 1024  # the kernel caps it at net.core.somaxconn (4096 on current Linux)
LINE_LIMIT = 8192  # a request line or header line; the game's longest is ~200 bytes
MAX_HEADERS = 100
MAX_CONNECTIONS = 512
WORKERS = 4
_CHUNK = 1 << 16
_METHOD = re.compile(r"^[A-Z]{1,16}$")
_LENGTH = re.compile(r"^[0-9]{1,15}$")  # ASCII digits only: str.isdigit() also accepts '²'


@dataclass
class Request:
    """One request as read off the connection (framing checked, body read whole)."""

    method: str
    target: str
    version: str
    headers: http.client.HTTPMessage
    body: bytes | None  # None: no Content-Length was sent


@dataclass
class Response:
    """What the application answers: a body in memory, or a file the connection streams."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    file: BinaryIO | None = None  # if set, `length` bytes are streamed from its position
    length: int = 0
    close: bool = False  # close the connection after this response


class HttpError(Exception):
    """Bad framing: answered with `status` and the message, then the connection is closed."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class _Hangup(Exception):
    """The client went away mid-request: there is no one to answer."""


def json_response(obj: object, status: int = 200, close: bool = False,
                  headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, [("Content-Type", "application/json"), *(headers or [])],
                    dumps(obj).encode("utf-8"), close=close)


class AsyncHTTPServer:
    """Listens at construction (so a busy port fails at once with OSError); `serve_forever`
    runs the loop in the calling thread until `shutdown()` (from another thread) or
    `request_stop()` (e.g. from a signal handler)."""

    server_name = "agl"  # the Server header

    def __init__(self, address: tuple[str, int], handler: Callable[[Request], Response], *,
                 idle_timeout_s: float, max_body_bytes: int, workers: int = WORKERS,
                 max_connections: int = MAX_CONNECTIONS):
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self.server_address = self.socket.getsockname()
        self.handler = handler
        self.idle_timeout_s = idle_timeout_s
        self.max_body_bytes = max_body_bytes
        self.workers = workers
        self.max_connections = max_connections
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._stopped = threading.Event()
        self._connections: set[asyncio.Task] = set()

    # --- life cycle ----------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """`poll_interval` is accepted for socketserver compatibility; the loop needs none."""
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    def request_stop(self) -> None:
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has already finished
                pass

    def shutdown(self) -> None:
        """Stop serving and wait until in-flight application calls have finished."""
        self.request_stop()
        if self._loop is not None:
            self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stop_requested:
            return
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="agl-play")
        self._pool = pool
        server = await asyncio.start_server(self._connection, sock=self.socket,
                                            limit=LINE_LIMIT)
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            # A guess being written finishes: stopping never cuts a record.
            pool.shutdown(wait=True)

    # --- one connection ------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            if len(self._connections) > self.max_connections:
                await self._write(writer, json_response(
                    {"error": f"more than {self.max_connections} connections; retry shortly"},
                    503, close=True))
                return
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, TimeoutError, _Hangup):
            pass  # the client left, or was too slow: nothing to answer
        except asyncio.CancelledError:
            # The server is stopping. Returning (not re-raising) ends the task normally:
            # Python 3.11's stream callback calls task.exception() on a cancelled task and
            # logs a spurious traceback.
            pass
        finally:
            self._connections.discard(task)
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # a client that does not read must not pin the socket
            else:
                writer.close()

    async def _exchange(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> bool:
        """Read one request, answer it; False when the connection is to be closed."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.idle_timeout_s):
                request = await self._read_request(reader, writer)
        except HttpError as exc:
            await self._write(writer, json_response({"error": exc.message}, exc.status,
                                                    close=True))
            return False
        if request is None:
            return False
        response = await loop.run_in_executor(self._pool, self.handler, request)
        connection = (request.headers.get("Connection") or "").lower()
        keep = request.version == "HTTP/1.1" and "close" not in connection
        response.close = response.close or not keep
        await self._write(writer, response)
        return not response.close

    async def _read_request(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> Request | None:
        lines: list[bytes] = []
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # asyncio's LimitOverrunError, re-raised by readline
                raise HttpError(431, f"a request or header line over {LINE_LIMIT} bytes") from None
            if not line.endswith(b"\n"):  # end of stream
                if lines or line:
                    raise _Hangup
                return None  # a keep-alive connection the client closed
            if line in (b"\r\n", b"\n"):
                if lines:
                    break
                continue  # blank lines before a request line are allowed (RFC 9112 2.2)
            lines.append(line)
            if len(lines) > MAX_HEADERS + 1:
                raise HttpError(431, f"more than {MAX_HEADERS} header lines")
        method, target, version = _request_line(lines[0])
        try:
            headers = http.client.parse_headers(io.BytesIO(b"".join(lines[1:]) + b"\r\n"))
        except http.client.HTTPException as exc:
            raise HttpError(431, f"headers refused ({exc})") from None
        length = self._body_length(headers)
        expect = headers.get("Expect")
        if expect is not None:
            if expect.strip().lower() != "100-continue":
                raise HttpError(417, f"Expect {expect[:40]!r} is not supported")
            if length and version == "HTTP/1.1":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = None
        if length is not None:
            try:
                body = await reader.readexactly(length)
            except asyncio.IncompleteReadError:
                # What arrived may parse, but it is not what was sent: record nothing.
                raise _Hangup from None
        return Request(method, target, version, headers, body)

    def _body_length(self, headers: http.client.HTTPMessage) -> int | None:
        if headers.get_all("Transfer-Encoding"):
            raise HttpError(411, "send the body with a Content-Length, not chunked")
        values = headers.get_all("Content-Length") or []
        if len(values) > 1:
            raise HttpError(400, f"{len(values)} Content-Length headers; send exactly one")
        if not values:
            return None
        text = values[0].strip()
        if not _LENGTH.match(text):
            raise HttpError(400, f"Content-Length {text[:40]!r} is not a number of bytes "
                                 "(ASCII digits)")
        length = int(text)
        if length > self.max_body_bytes:
            # Not read: the connection is closed rather than swallow an oversized body.
            raise HttpError(413, f"body of {length} bytes exceeds the "
                                 f"{self.max_body_bytes}-byte limit")
        return length

    async def _write(self, writer: asyncio.StreamWriter, response: Response) -> None:
        try:
            length = response.length if response.file is not None else len(response.body)
            phrase = _phrase(response.status)
            head = [f"HTTP/1.1 {response.status} {phrase}", f"Server: {self.server_name}",
                    f"Date: {email.utils.formatdate(usegmt=True)}",
                    *(f"{k}: {v}" for k, v in response.headers),
                    f"Content-Length: {length}"]
            if response.close:
                head.append("Connection: close")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            if response.file is None:
                writer.write(response.body)
                await self._drain(writer)
                return
            left = length
            while left > 0:
                block = response.file.read(min(_CHUNK, left))
                if not block:
                    # The file shrank under us: the promised length cannot be kept.
                    response.close = True
                    break
                writer.write(block)
                left -= len(block)
                await self._drain(writer)
        finally:
            if response.file is not None:
                response.file.close()

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(self.idle_timeout_s):
            await writer.drain()


def _request_line(raw: bytes) -> tuple[str, str, str]:
    text = raw.decode("latin-1").rstrip("\r\n")
    parts = text.split(" ")
    if len(parts) != 3:
        raise HttpError(400, f"request line {text[:80]!r} is not 'METHOD /path HTTP/1.1'")
    method, target, version = parts
    if not _METHOD.match(method):
        raise HttpError(400, f"method {method[:20]!r} is not an HTTP method")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise HttpError(400, f"version {version[:20]!r}: only HTTP/1.0 and HTTP/1.1 are served")
    if not target.startswith("/"):
        raise HttpError(400, "request target must be a path starting with '/'")
    return method, target, version


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"
