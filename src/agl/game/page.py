"""The shared half of agl's local page servers (`agl play`, `agl explore`).

On the asyncio server of `agl.game.httpserver` (a total deadline per request, bounded
connections, a worker pool), a `PageServer` answers each request in one place (`handle`):
the Host is a loopback name when listening on loopback, path segments are checked, the
subclass's `route` picks a response from a closed list, and every refusal is a 4xx JSON
`{"error": "..."}` with one sentence. A URL never becomes a filesystem path: files are the
package's static folder (read once) and the files a subclass chooses (`send_file`, with
HTTP Range so a player can seek). Every page is served under a strict
Content-Security-Policy: it may load only what this server serves.
"""

from __future__ import annotations

import abc
import importlib.resources
import os
import re
import signal
import sys
import webbrowser
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from agl.core.jsonutil import dumps
from agl.game.httpserver import AsyncHTTPServer, Request, Response, json_response
from agl.game.session import RequestError

MAX_BODY_BYTES = 4096  # a guess is ~200 bytes; anything near this is not from the page
# A request must arrive complete (line, headers, body) within this many seconds of the
# connection being ready for it, or the connection is closed: a client trickling its headers
# a byte at a time is cut here, not kept for as long as it cares to trickle.
IDLE_TIMEOUT_S = 20.0
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}
# ASCII digits ([0-9], not \d: '²' is a Unicode digit that int() refuses); 18: past any file
_RANGE = re.compile(r"^bytes=([0-9]{0,18})-([0-9]{0,18})$")
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
# The page may load only what this server serves: no CDN, no network, no inline script.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "media-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def load_static(package: str = "agl.game") -> dict[str, tuple[bytes, str]]:
    """The page's files, by name, read once: the only files besides audio ever served."""
    root = importlib.resources.files(package) / "static"
    files = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return files


class CloseAfter(RequestError):
    """A refusal after which the connection is closed (its framing cannot be trusted)."""


class PageServer(AsyncHTTPServer, abc.ABC):
    """A local page server; a subclass sets `program` and implements `route`."""

    program = "agl play"  # names the program in its messages

    def __init__(self, address: tuple[str, int], *, static_package: str,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, max_body_bytes: int = MAX_BODY_BYTES):
        self.static = load_static(static_package)
        self.loopback_only = address[0] in LOOPBACK_NAMES
        self.server_name = self.program.replace(" ", "-")
        super().__init__(address, self.handle, idle_timeout_s=idle_timeout_s,
                         max_body_bytes=max_body_bytes)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def run_until_stopped(self, open_browser: bool) -> None:
        """Serve until Ctrl-C or SIGTERM (the loop finishes the requests in flight, then
        returns), optionally opening the page in the user's browser first."""

        def stop(signum: int, frame: Any) -> None:
            self.request_stop()

        signal.signal(signal.SIGTERM, stop)
        if open_browser:
            webbrowser.open(self.url)
        try:
            self.serve_forever()
        except KeyboardInterrupt:  # Ctrl-C: asyncio cancels the loop's tasks, then raises this
            pass
        finally:
            self.server_close()

    @abc.abstractmethod
    def route(self, request: Request, parts: list[str]) -> Response:
        """The response to a checked request (`parts`: its path's decoded segments)."""

    def handle(self, request: Request) -> Response:
        """One request -> its response; runs on the worker pool. Never raises."""
        try:
            self._check_host(request)
            return self.route(request, path_parts(request.target))
        except RequestError as exc:
            return json_response({"error": exc.message}, exc.status,
                                 close=isinstance(exc, CloseAfter))
        except Exception as exc:  # a bug here must answer, not hang the page
            what = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:200]
            print(f"{self.program}: internal error on {request.method} "
                  f"{request.target[:80]!r}: {what}", file=sys.stderr, flush=True)
            return json_response({"error": f"internal error: {what}"}, 500, close=True)

    def _check_host(self, request: Request) -> None:
        """On loopback, answer only to loopback names: a web page elsewhere that rebinds its
        DNS name to 127.0.0.1 cannot read the page or write to it."""
        hosts = request.headers.get_all("Host") or []
        if len(hosts) > 1:  # which one a proxy or a check reads differs: refuse both
            raise CloseAfter(400, f"{len(hosts)} Host headers; send exactly one")
        if not self.loopback_only:
            return
        host = (request.headers.get("Host") or "").strip()
        name = host[1:].split("]")[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        if name not in LOOPBACK_NAMES:
            raise RequestError(403, f"Host {host[:80]!r} refused: open the URL "
                                    f"{self.program} printed")

    def static_file(self, name: str) -> Response:
        if name not in self.static:
            raise RequestError(404, f"no static file {name[:80]!r}")
        body, ctype = self.static[name]
        return send(body, ctype)

    def send_file(self, path: Path, ctype: str, what: str, request: Request) -> Response:
        """A file (chosen by the server, never named by the URL), with HTTP Range; the
        connection layer streams it."""
        range_header = request.headers.get("Range")
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise RequestError(404, f"{what} unreadable ({exc.strerror})") from None
        try:
            size = os.fstat(fh.fileno()).st_size
            span = byte_range(range_header, size)
            if span is None:
                fh.close()
                return json_response(
                    {"error": f"range {range_header[:60]!r} not satisfiable (size {size})"},
                    HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                    headers=[("Content-Range", f"bytes */{size}")])
            start, end = span
            ranged = bool(range_header) and size > 0
            headers = [*page_headers(ctype, cache=True), ("Accept-Ranges", "bytes")]
            if ranged:
                headers.append(("Content-Range", f"bytes {start}-{end}/{size}"))
            fh.seek(start)
        except BaseException:
            fh.close()
            raise
        return Response(HTTPStatus.PARTIAL_CONTENT if ranged else HTTPStatus.OK, headers,
                        file=fh, length=end - start + 1 if size else 0)


def path_parts(target: str) -> list[str]:
    """The decoded segments of a request's path; '.', '..', encoded '/', '\\' or NUL refused."""
    parts = [unquote(p) for p in urlsplit(target).path.split("/")[1:]]
    for p in parts:
        if p in (".", "..") or "/" in p or "\\" in p or "\x00" in p:
            raise RequestError(400, "path segments '.', '..', encoded '/', '\\' and NUL are "
                                    "refused")
    return parts


def page_headers(ctype: str, cache: bool = False) -> list[tuple[str, str]]:
    return [
        ("Content-Type", ctype),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Content-Security-Policy", _CSP),
        ("Cache-Control", "max-age=3600" if cache else "no-store"),
    ]


def send(body: bytes, ctype: str, status: int = 200, cache: bool = False) -> Response:
    """A response of `body` under the page's headers."""
    return Response(status, page_headers(ctype, cache), body)


def send_json(obj: Any, status: int = 200) -> Response:
    return send(dumps(obj).encode("utf-8"), "application/json", status)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The byte range asked for (inclusive), the whole file, or None if not satisfiable;
    one range only."""
    if not header or size == 0:
        return 0, max(size - 1, 0)
    m = _RANGE.match(header.strip())
    if m and (m[1] or m[2]):
        if m[1]:
            start = int(m[1])
            end = min(int(m[2]), size - 1) if m[2] else size - 1
        else:  # a suffix range: the last N bytes
            start, end = max(size - int(m[2]), 0), size - 1
        if start <= end and start < size:
            return start, end
    return None
