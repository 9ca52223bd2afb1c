"""A hostile HTTP server on 127.0.0.1: endless, slow, bombing, lying and redirecting replies.

`HostileServer(routes)` serves each path with a behaviour, a function of the request handler;
the helpers below make the ones issue 24 names. A route may be a list: each request takes the
next behaviour and the last one repeats (an error page, then a recovered server). Every
request is logged by path. Behaviours that never end stop when the server stops (or the
client goes away), so a test's teardown is never stuck.

`run_measured` runs an `agl` command in a fresh interpreter and reports its time and the
growth of its peak resident memory (resource.getrusage), for the bounded-memory checks.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]

Behaviour = Callable[[BaseHTTPRequestHandler], None]


@cache
def gzip_bomb(mib: int = 1024) -> bytes:
    """One valid gzip member that decodes to `mib` MiB of zeros (1 GiB by default) from
    about 1 MB: identical deflate blocks, each flushed to stand alone, then a true trailer."""
    zero = bytes(1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()  # the final, empty block
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zero, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    bomb = header + first + block * (mib - 1) + end + struct.pack("<II", crc, (mib << 20) % 2**32)
    if mib <= 4:
        assert gzip.decompress(bomb) == zero * mib
    return bomb


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


# --------------------------------------------------------------------------- measured runs
_DRIVER = r"""
import gc, importlib, json, sys, time
for name in sys.argv[1].split(","):
    if name:
        importlib.import_module(name)
from agl.cli import main

def status(key):  # KiB, from the kernel's view of this process's own memory
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))

gc.collect()
base = status("VmRSS")
t0 = time.monotonic()
try:
    rc = main(sys.argv[2:])
except SystemExit as exc:
    rc = exc.code
grown = status("VmHWM") - base
sys.stdout.write("\nAGL-MEASURED " + json.dumps({"rc": rc, "seconds": time.monotonic() - t0,
                                                 "rss_growth_mb": grown / 1024}) + "\n")
"""


@dataclass
class Measured:
    rc: int
    seconds: float  # the command's own time, imports excluded
    rss_growth_mb: float  # peak resident memory gained while the command ran
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_measured(argv: list[str], *, cwd: Path, preload: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, timeout: float = 120) -> Measured:
    """`agl <argv>` in a fresh interpreter: exit code, seconds, peak RSS growth (VmHWM, the
    peak resident size of the process's own memory, less VmRSS before the command: unlike
    getrusage's ru_maxrss it does not inherit the parent's size across fork and exec; the
    modules in `preload` are imported before the baseline, so imports do not count), and its
    output. It prints one `measured:` line, so `pytest -s` lists the figures. Linux only."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "src"), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", _DRIVER, ",".join(preload), *argv],
                          cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    tail = proc.stdout.rsplit("AGL-MEASURED ", 1)
    if len(tail) != 2:
        raise AssertionError(f"no measurement; rc {proc.returncode}\n{proc.stderr[-3000:]}")
    got = json.loads(tail[1])
    m = Measured(got["rc"], got["seconds"], got["rss_growth_mb"], tail[0], proc.stderr)
    print(f"measured: agl {argv[0]} rc {m.rc}, {m.seconds:.2f} s, "
          f"RSS +{m.rss_growth_mb:.1f} MB", file=sys.stderr)
    return m


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


def bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in files_under(path))
