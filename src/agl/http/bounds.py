"""The rules of a bounded HTTP read, without the transport: `agl.http.client` has the clients.

`Limits` (per-read timeout, total deadline, size cap, redirect hosts), `Refused` (one line,
retryable or not), and what a transport applies per request: `Checks` on the status line
and headers (redirect off the host, an encoding agl cannot cap, a declared length past the
cap, an HTML page with a success status) and the `Meter` on the body (decoded in pieces of at
most 64 KiB, every decoded byte counted against the cap, the deadline checked between
reads). No httpx import here: both httpx families' transports (`agl.http.transport`)
share these.
"""

from __future__ import annotations

import functools
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agl.errors import AglError

if TYPE_CHECKING:
    import httpx

PIECE = 64 * 1024  # the largest decoded piece held at once
ACCEPT_ENCODING = "gzip, deflate"  # what agl can decode under a cap
_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_BYTES_KEY = "agl_max_bytes"  # request extension: this request's own cap
_CAP_NAME_KEY = "agl_cap_name"  # request extension: where that cap is set, for refusals
_DEADLINE_KEY = "agl_deadline"  # request extension: the monotonic deadline, kept by redirects


@dataclass(frozen=True)
class Limits:
    """The bounds of one client's requests; `param` names their params.yaml section (or CLI
    flag family) in refusals, so the line says what to change."""

    timeout_s: float = 60.0  # each connect, read and write
    deadline_s: float | None = 600.0  # the whole request: headers and body, across redirects
    max_bytes: int | None = 100_000_000  # decoded body bytes
    redirect_hosts: tuple[str, ...] = ()  # more hosts a redirect may go to (".x.org": subdomains)
    max_redirects: int = 5
    param: str = ""  # e.g. "download": refusals name download.deadline_s
    # A stalled transfer (curl's --speed-limit / --speed-time): once the first byte has come,
    # a window of `stall_window_s` that brings fewer than `min_rate_bps` bytes a second on
    # average ends the request, besides the deadline. None: no floor (a model's reply, which
    # the runner's per-call timeout bounds, may pause while it thinks).
    min_rate_bps: float | None = None
    stall_window_s: float = 30.0

    def name(self, key: str) -> str:
        """How the user sets `key`: `download.deadline_s`, or `--deadline-s` (param "--")."""
        if self.param == "--":
            return "--" + key.replace("_", "-")
        return f"{self.param}.{key}" if self.param else key


class Pace:
    """One request's bytes over time, from its first byte: `add` after every socket read.
    A window of `limits.stall_window_s` under `limits.min_rate_bps` marks it `stalled` and
    raises `timeout` (the family's ReadTimeout, which the transport turns into the stall's
    own refusal)."""

    def __init__(self, limits: Limits):
        self.rate, self.window = limits.min_rate_bps, float(limits.stall_window_s)
        self.start: float | None = None
        self.count = 0
        self.stalled = False

    def add(self, n: int, timeout: type[Exception]) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        if self.start is None:
            if n:
                self.start, self.count = now, n
            return
        self.count += n
        if now - self.start < self.window:
            return
        if self.count < self.rate * (now - self.start):
            self.stalled = True
            raise timeout(f"stalled: {self.count} bytes in {now - self.start:.0f} s")
        self.start, self.count = now, 0


def stall_refusal(url: httpx.URL, limits: Limits, pace: Pace) -> Refused:
    keys = ("" if limits.param == "--"  # a command whose flags do not set the floor
            else f" ({limits.name('min_rate_bps')}, {limits.name('stall_window_s')})")
    return Refused(f"the transfer stalled: {pace.count:,} byte(s) in {limits.stall_window_s:g} s, "
                   f"under {limits.min_rate_bps:g} bytes/s{keys}", retryable=True)


class Refused(Exception):
    """A response agl will not read further. `retryable`: another attempt may get a good one."""

    def __init__(self, reason: str, *, retryable: bool = False):
        super().__init__(reason)
        self.retryable = retryable


def looks_like_html(prefix: bytes) -> bool:
    """Whether a body starts like an HTML page (an error page served with status 200)."""
    head = prefix[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def is_html_type(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")


def with_cap(max_bytes: int | None, name: str | None = None) -> dict[str, Any]:
    """Request `extensions` giving this request its own size cap (e.g. a clip's listed
    size); `name` says where it is set, for the refusal's line."""
    return {_MAX_BYTES_KEY: max_bytes, **({_CAP_NAME_KEY: name} if name else {})}


# --------------------------------------------------------------------------- decoding under a cap
class _Decoder:
    """gzip / deflate / identity, decoded in pieces of at most PIECE bytes."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        if encoding in ("", "identity"):
            self._wbits = None
        elif encoding in ("gzip", "x-gzip"):
            self._wbits = 16 + zlib.MAX_WBITS
        elif encoding == "deflate":
            self._wbits = zlib.MAX_WBITS  # zlib-wrapped; raw deflate is tried on a bad header
        else:
            raise Refused(f"Content-Encoding {encoding!r} is not one agl decodes under a size "
                          f"cap ({ACCEPT_ENCODING})")
        self._z = zlib.decompressobj(self._wbits) if self._wbits is not None else None
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._z is None:
            yield data
            return
        try:
            yield from self._inflate(data)
        except zlib.error as exc:
            raise Refused(f"the {self.encoding} body does not decode ({exc})") from None

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        if not self._started and self.encoding == "deflate":
            self._started = True
            try:  # servers disagree on what "deflate" means: zlib-wrapped, or raw
                zlib.decompressobj(zlib.MAX_WBITS).decompress(data[:64], 1)
            except zlib.error:
                self._wbits = -zlib.MAX_WBITS
                self._z = zlib.decompressobj(self._wbits)
        buf = data
        while True:
            out = self._z.decompress(buf, PIECE)
            if out:
                yield out
            if self._z.eof:  # a member ended; what follows is the next (gzip allows many)
                buf = self._z.unused_data  # (unconsumed_tail holds the same bytes)
                self._z = zlib.decompressobj(self._wbits)
                if not buf:
                    return
                continue
            buf = self._z.unconsumed_tail
            if not buf and len(out) < PIECE:
                return  # input used up and no output pending


class Meter:
    """Counts raw and decoded bytes against the cap and the clock against the deadline."""

    def __init__(self, url: httpx.URL, limits: Limits, decoder: _Decoder,
                 cap: tuple[int | None, str], deadline: float | None, refuse_html: bool):
        self.url, self.limits, self.decoder = url, limits, decoder
        (self.cap, self.cap_name), self.deadline = cap, deadline
        self.raw = self.decoded = 0
        self.head = b""  # the first bytes, held back until the HTML check has seen them
        self.head_done = not refuse_html

    def pieces(self, chunk: bytes) -> Iterator[bytes]:
        self.raw += len(chunk)
        if self.cap is not None and self.raw > self.cap:
            raise self._too_large()
        for piece in self.decoder.feed(chunk):
            self.decoded += len(piece)
            if self.cap is not None and self.decoded > self.cap:
                raise self._too_large()
            if not self.head_done:
                self.head += piece
                if len(self.head) < 512:
                    continue
                piece = self._checked_head()
            yield piece
        self.check_clock()

    def end(self) -> Iterator[bytes]:
        if not self.head_done and self.head:
            yield self._checked_head()

    def _checked_head(self) -> bytes:
        self.head_done = True
        if looks_like_html(self.head):
            raise Refused("reply unreadable: an HTML page, not the reply (an error page "
                          "served as a success)", retryable=True)
        head, self.head = self.head, b""
        return head

    def check_clock(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise deadline_refusal(self.url, self.limits)

    def _too_large(self) -> Refused:
        return Refused(f"the server sent more than {self.cap:,} bytes (after decoding); "
                       f"refused at {self.cap_name}")


def deadline_refusal(url: httpx.URL, limits: Limits) -> Refused:
    return Refused(f"the reply did not finish within {limits.deadline_s:g} s "
                   f"({limits.name('deadline_s')})", retryable=True)


def _where(url: httpx.URL) -> str:
    return str(url.copy_with(query=None, fragment=None))  # a query may carry a key


class Checks:
    """One request's bounds as its transport applies them: the deadline (set on the first
    hop, kept by redirects in the request's extensions), the size cap, and the checks on the
    status line and headers before any of the body is read."""

    def __init__(self, transport: Any, request: httpx.Request):
        self.limits, self.request = transport.limits, request
        self.refuse_html = transport.refuse_html
        if request.headers.get("Accept-Encoding", "").strip().lower() != "identity":
            request.headers["Accept-Encoding"] = ACCEPT_ENCODING
        if _DEADLINE_KEY not in request.extensions and self.limits.deadline_s is not None:
            request.extensions[_DEADLINE_KEY] = time.monotonic() + self.limits.deadline_s
        self.deadline: float | None = request.extensions.get(_DEADLINE_KEY)
        self.pace = Pace(self.limits)
        if _MAX_BYTES_KEY in request.extensions:
            self.cap = (request.extensions[_MAX_BYTES_KEY],
                        request.extensions.get(_CAP_NAME_KEY) or self.limits.name("max_bytes"))
        elif transport.cap_for is not None:
            self.cap = transport.cap_for(request)
        else:
            self.cap = self.limits.max_bytes, self.limits.name("max_bytes")
        self.decoding = False

    def head(self, status: int, headers: httpx.Headers) -> Meter:
        """Refuse a redirect off the host, an encoding agl cannot cap, a declared length over
        the cap, an HTML page with a success status; the meter for the body."""
        url = self.request.url
        if status in _REDIRECTS and "location" in headers:
            check_redirect(url, headers["location"], self.limits)
        decoder = _Decoder(headers.get("content-encoding", "identity").strip().lower())
        self.decoding = decoder._z is not None
        cap, name = self.cap
        declared = headers.get("content-length", "")
        if not self.decoding and cap is not None and declared.isdigit() and int(declared) > cap:
            raise Refused(f"the server declares {int(declared):,} bytes, more than "
                          f"{cap:,} ({name}); not read")
        ok = 200 <= status < 300
        if self.refuse_html and ok and is_html_type(headers.get("content-type")):
            raise Refused("reply unreadable: an HTML page with status "
                          f"{status}, not the reply (an error page served as a success)",
                          retryable=True)
        return Meter(url, self.limits, decoder, self.cap, self.deadline, self.refuse_html and ok)


# --------------------------------------------------------------------------- redirects
def redirect_allowed(source: httpx.URL, target: httpx.URL, extra_hosts: tuple[str, ...]) -> bool:
    """Same host or a subdomain of it, or a listed host; https is never given up for http."""
    if target.scheme not in ("http", "https"):
        return False
    if source.scheme == "https" and target.scheme != "https":
        return False
    src, dst = source.host.lower(), target.host.lower()
    return any(dst == host or dst.endswith("." + host) for host in (src, *(h.lower() for h in extra_hosts)))


_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


def check_redirect_hosts(hosts: Any, field: str) -> tuple[str, ...]:
    """`redirect_hosts` from params: a list of host names, each covering itself and its
    subdomains (as the source host does). Refused in one line naming `field`: a leading dot
    (`.com` used to follow a redirect to any .com host), a wildcard (`*` was accepted and
    matched nothing), a scheme, port, path or any other character a host name has not, and a
    public suffix alone (`com`, `co.uk`, `github.io`: the Public Suffix List, bundled with
    publicsuffixlist, so no network): one host of a public suffix is not another's."""
    import ipaddress

    if hosts is None:
        return ()
    if not isinstance(hosts, list):
        raise AglError(f"{field}: must be a list of host names (e.g. [cdn.example.org]), not {hosts!r}")
    out = []
    for h in hosts:
        shown = repr(h)[:60]
        if not isinstance(h, str) or not h.strip():
            raise AglError(f"{field}: {shown} is not a host name (e.g. cdn.example.org)")
        host = h.strip().lower()
        if host.startswith("."):
            raise AglError(f"{field}: {shown} starts with a dot; write the host itself "
                           f"({host.lstrip('.') or 'cdn.example.org'}): a listed host covers its subdomains")
        if "*" in host:
            raise AglError(f"{field}: {shown} is a wildcard; list host names (a listed host covers "
                           "its subdomains)")
        try:
            ipaddress.ip_address(host)
            out.append(host)
            continue
        except ValueError:
            pass
        try:
            ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
        except UnicodeError:
            ascii_host = ""
        if not _HOST.match(ascii_host) or len(ascii_host) > 253:
            raise AglError(f"{field}: {shown} is not a host name (no scheme, port or path: e.g. "
                           "cdn.example.org)")
        if _public_suffixes().is_public(ascii_host):
            raise AglError(f"{field}: {shown} is a public suffix (any site under it could register a "
                           "name there); list the host that serves the files (e.g. cdn.example.org)")
        out.append(ascii_host)
    return tuple(out)


@functools.cache
def _public_suffixes():
    from publicsuffixlist import PublicSuffixList

    # accept_unknown=False: a name under no listed suffix (localhost, an intranet host) is a host
    return PublicSuffixList(accept_unknown=False)


def check_redirect(source: httpx.URL, location: str, limits: Limits) -> None:
    try:
        target = source.join(location)
    except Exception:  # noqa: BLE001 - httpx's or httpx2's InvalidURL
        raise Refused(f"the server redirects to an invalid URL {location[:200]!r}") from None
    if not redirect_allowed(source, target, limits.redirect_hosts):
        why = ("from https to http" if target.scheme != source.scheme and source.scheme == "https"
               else f"to another host ({source.host} -> {target.host or target.scheme})")
        raise Refused(f"the server redirects {why}: {_where(target)} not followed "
                      f"(allow a host with {limits.name('redirect_hosts')})")
