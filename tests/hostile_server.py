"""A hostile HTTP server on 127.0.0.1: endless, slow, bombing, lying and redirecting replies.

`HostileServer(routes)` serves each path with a behaviour, a function of the request handler;
the helpers below make the ones issue 24 names. A route may be a list: each request takes the
next behaviour and the last one repeats (an error page, then a recovered server). Every
request is logged by path. Behaviours that never end stop when the server stops (or the
client goes away), so a test's teardown is never stuck.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

Behaviour = Callable[[BaseHTTPRequestHandler], None]


@cache
def gzip_bomb(members: int = 64) -> bytes:
    """A valid gzip stream of `members` x 16 MiB of zeros (1 GiB by default) in about 1 MB."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    one = c.compress(bytes(16 << 20)) + c.flush()
    assert len(gzip.decompress(one)) == 16 << 20
    return one * members


def _head(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str]) -> None:
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.end_headers()


def body(data: bytes, ctype: str = "application/octet-stream", status: int = 200,
         headers: dict[str, str] | None = None) -> Behaviour:
    def run(h):
        _head(h, status, {"Content-Type": ctype, "Content-Length": str(len(data)),
                          **(headers or {})})
        if h.command != "HEAD":
            h.wfile.write(data)
    return run


def json_body(obj, status: int = 200, headers: dict[str, str] | None = None) -> Behaviour:
    return body(json.dumps(obj).encode(), "application/json", status, headers)


def html_page(status: int = 200) -> Behaviour:
    """The error page a proxy or CDN serves, with a success status."""
    return body(b"<!DOCTYPE html>\n<html><head><title>Error</title></head><body>Service "
                b"temporarily unavailable</body></html>\n", "text/html; charset=utf-8", status)


def endless(ctype: str = "application/octet-stream") -> Behaviour:
    """A chunked body that never ends, as fast as the client reads."""
    block = b"\0" * 65536
    frame = f"{len(block):x}\r\n".encode() + block + b"\r\n"

    def run(h):
        _head(h, 200, {"Content-Type": ctype, "Transfer-Encoding": "chunked"})
        try:
            while not h.server.stop.is_set():
                h.wfile.write(frame)
        except OSError:
            pass
        h.close_connection = True
    return run


def slow_body(interval_s: float, ctype: str = "application/octet-stream") -> Behaviour:
    """Headers at once, then a chunked body of one byte per `interval_s`, for ever."""
    def run(h):
        _head(h, 200, {"Content-Type": ctype, "Transfer-Encoding": "chunked"})
        try:
            while not h.server.stop.wait(interval_s):
                h.wfile.write(b"1\r\n{\r\n")
                h.wfile.flush()
        except OSError:
            pass
        h.close_connection = True
    return run


def slow_headers(interval_s: float) -> Behaviour:
    """The status line, then the headers one byte per `interval_s`, never finished."""
    def run(h):
        try:
            h.wfile.write(b"HTTP/1.1 200 OK\r\n")
            h.wfile.flush()
            for byte in b"X-Slow: " + b"a" * 100000:
                if h.server.stop.wait(interval_s):
                    break
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
        except OSError:
            pass
        h.close_connection = True
    return run


def gzipped(payload: bytes, ctype: str = "application/octet-stream") -> Behaviour:
    """`payload` sent as is with `Content-Encoding: gzip` (a bomb: `gzip_bomb()`)."""
    return body(payload, ctype, headers={"Content-Encoding": "gzip"})


def redirect(location: str, status: int = 302) -> Behaviour:
    return body(b"", "text/plain", status, {"Location": location})


class HostileServer:
    def __init__(self, routes: dict[str, Behaviour | list[Behaviour]] | None = None):
        self.routes: dict[str, Behaviour | list[Behaviour]] = dict(routes or {})
        self.log: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle(self):
                try:
                    super().handle()
                except OSError:  # the client gave up on us: what a bounded client does
                    pass

            def do_GET(self):  # noqa: N802
                if self.command == "POST":
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = urlsplit(self.path).path
                behaviour = server._next(path)
                if behaviour is None:
                    return body(b"not found", "text/plain", 404)(self)
                try:
                    behaviour(self)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            do_POST = do_HEAD = do_GET  # noqa: N815

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.stop = threading.Event()  # set when the server stops: loops end

    def _next(self, path: str) -> Behaviour | None:
        with self._lock:
            self.log[path] += 1
            found = self.routes.get(path)
            if isinstance(found, list):
                return found.pop(0) if len(found) > 1 else found[0]
            return found

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileServer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.stop.set()
        time.sleep(0.05)  # let looping handlers see it
        self._httpd.shutdown()
        self._httpd.server_close()
