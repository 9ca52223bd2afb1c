"""A local stand-in for the Internet Archive: files over HTTP with Range, metadata, faults.

Serves `root/<key>/<name>` at `/download/<key>/<name>` (with `Range: bytes=N-`), per-item
metadata JSON at `/metadata/<key>`, advanced-search / scrape JSON for crawl tests, and any
extra documents at their paths. Tests queue faults per path and read the request log.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class Logged:
    path: str
    headers: dict[str, str]
    status: int = 0
    body_bytes: int = 0


@dataclass
class FakeArchive:
    root: Path | None = None
    metadata: dict[str, object] = field(default_factory=dict)
    documents: dict[str, bytes] = field(default_factory=dict)
    faults: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    log: list[Logged] = field(default_factory=list)
    honour_range: bool = True
    scrape: object | None = None  # callable(query: dict) -> (status, dict) for crawl tests
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0  # 0: a free one (a test that comes back on a port it found closed names it)

    def start(self) -> FakeArchive:
        archive = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                archive._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def requests(self, prefix: str = "/download/") -> list[Logged]:
        return [r for r in self.log if r.path.startswith(prefix)]

    # --- request handling -------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        path = unquote(parts.path)
        entry = Logged(path=path, headers={k: v for k, v in h.headers.items()})
        self.log.append(entry)
        queue = self.faults.get(path)
        fault = queue.pop(0) if queue else None
        if fault and fault.split(":")[0].isdigit():
            code, _, retry_after = fault.partition(":")
            headers = {"Retry-After": retry_after} if retry_after else {}
            return self._send(h, entry, int(code), b"fault", headers)
        if fault == "stall":
            self.release.wait(10)  # until the test ends: the client's timeout fires first
            return self._send(h, entry, 503, b"late")
        if path.startswith("/metadata/"):
            doc = self.metadata.get(path.removeprefix("/metadata/"))
            if doc is None:
                return self._send(h, entry, 404, b"{}")
            return self._send(h, entry, 200, json.dumps(doc).encode(), _JSON)
        if path in ("/advancedsearch.php", "/services/search/v1/scrape") and self.scrape:
            status, doc = self.scrape(path, parse_qs(parts.query))
            return self._send(h, entry, status, json.dumps(doc).encode(), _JSON)
        if path in self.documents:
            return self._send(h, entry, 200, self.documents[path])
        if path.startswith("/download/") and self.root is not None:
            file = self.root / path.removeprefix("/download/")
            if file.is_file():
                return self._serve_file(h, entry, file.read_bytes(), fault)
        return self._send(h, entry, 404, b"not found")

    def _serve_file(self, h, entry: Logged, data: bytes, fault: str | None) -> None:
        start = 0
        rng = h.headers.get("Range")
        status, headers = 200, {}
        if rng and self.honour_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                return self._send(h, entry, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        if fault and fault.startswith("hang"):
            # send part of the body, then hold the connection open until the test ends
            keep = int(fault.split(":")[1])
            entry.status = status
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body[:keep])
            h.wfile.flush()
            entry.body_bytes = keep
            self.release.wait(30)
            h.close_connection = True
            return None
        if fault and fault.startswith("cut"):
            # announce the whole body, send part of it, then drop the connection
            keep = int(fault.split(":")[1])
            return self._send(h, entry, status, body, headers, cut_after=keep)
        if fault == "flip":
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        return self._send(h, entry, status, body, headers)

    def _send(self, h, entry, status, body, headers=None, cut_after=None) -> None:
        entry.status = status
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        if cut_after is not None:
            h.send_header("Connection", "close")
        h.end_headers()
        sent = body if cut_after is None else body[:cut_after]
        try:
            h.wfile.write(sent)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return
        entry.body_bytes = len(sent)
        if cut_after is not None:
            h.close_connection = True
            h.connection.shutdown(2)  # SHUT_RDWR: the client sees a short body


_JSON = {"Content-Type": "application/json"}
