"""Bounded HTTP: every network read agl makes has a deadline, a size cap and a redirect rule.

A server can answer with an endless body, one byte every ten seconds (body or headers), a
gzip bomb, a body larger than any file it should send, or a redirect to a host nobody chose.
Every client agl makes (the dataset downloads, the crawler, the paper's files, the model SDKs'
replies) goes through the transports of `agl.http.transport` (for httpx, or the httpx2
fork the model SDKs use), which wrap httpx's own and enforce, per request:

* a per-read timeout (`timeout_s`: connect, each read, each write) and a total deadline
  (`deadline_s`: headers and body together, across redirects). The deadline reaches the
  socket: each read waits at most until the deadline, so headers sent a byte at a time are
  cut off as surely as a slow body;
* a size cap (`max_bytes`) on the decoded body, counted as it streams, so nothing past it is
  held or written; a declared `Content-Length` over the cap is refused before the body;
* capped decompression: gzip and deflate are decoded here, in pieces of at most 64 KiB, and
  every decoded byte counts against the cap (a gzip bomb is refused after `max_bytes`, not
  after 3 GB); any other `Content-Encoding` is refused;
* redirects: followed (at most `max_redirects`) to the same host or one of its subdomains
  (archive.org/download -> ia800.us.archive.org), or to a host listed in `redirect_hosts`;
  never from https to http; any other redirect is refused, naming both hosts.

Each refusal is a `Refused` exception with one line of reason and whether another attempt
may help (`retryable`: a deadline, an HTML error page; not: a size cap, a redirect). The
callers turn it into their own one-line error; what to cache is their decision, made after a
content check (`looks_like_html` and a parse), never before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agl.core.nofollow import NotARegularFile, open_part
from agl.http.bounds import (
    ACCEPT_ENCODING,
    Limits,
    Refused,
    check_redirect,
    deadline_refusal,
    is_html_type,
    looks_like_html,
    redirect_allowed,
    with_cap,
)
from agl.http.transport import family

if TYPE_CHECKING:
    import httpx

__all__ = ["ACCEPT_ENCODING", "Fetched", "Limits", "Refused", "async_client_args",
           "check_redirect", "client", "deadline_refusal", "flavour_of", "is_html_type",
           "looks_like_html", "redirect_allowed", "stream_to_file", "with_cap"]


# --------------------------------------------------------------------------- clients
def client(limits: Limits, *, headers: dict[str, str] | None = None,
           max_connections: int = 100) -> httpx.Client:
    """A synchronous httpx client whose every request is bounded by `limits`."""
    f = family("httpx")

    def make(proxy):
        return f.BoundedTransport(limits, max_connections=max_connections, proxy=proxy)

    return f.hx.Client(headers=headers, timeout=f.hx.Timeout(limits.timeout_s),
                       follow_redirects=True, max_redirects=limits.max_redirects,
                       transport=make(None), mounts=f.proxy_mounts(make))


def async_client_args(limits: Limits, *, refuse_html: bool = True,
                      cap_for: Callable[[httpx.Request], tuple[int | None, str]] | None = None,
                      flavour: str = "httpx") -> dict[str, Any]:
    """Keyword arguments of an async client of the httpx family `flavour` ("httpx", or
    "httpx2" for an SDK built on that fork) whose every request is bounded: the transport
    and the proxies' transports."""
    f = family(flavour)

    def make(proxy):
        return f.AsyncBoundedTransport(limits, refuse_html=refuse_html, cap_for=cap_for,
                                       proxy=proxy)

    return {"transport": make(None), "mounts": f.proxy_mounts(make),
            "max_redirects": limits.max_redirects}


def flavour_of(client_class: type) -> str:
    """"httpx" or "httpx2": the family an SDK's client class belongs to."""
    for cls in client_class.__mro__:
        if (cls.__module__ or "").split(".")[0] == "httpx2":
            return "httpx2"
    return "httpx"


@dataclass(frozen=True)
class Fetched:
    status_code: int
    sha256: str | None  # None: not read (a status other than 200)
    content_type: str | None


def stream_to_file(url: str, part: Path, limits: Limits,
                   headers: dict[str, str] | None = None) -> Fetched:
    """GET `url` into `part`, streamed (never held in memory), bounded by `limits`, hashed
    as it goes; the body is read only for status 200. Raises `Refused` past a bound and
    httpx's errors for the connection; `part` is removed on any failure."""
    import hashlib

    digest = hashlib.sha256()
    with client(limits, headers=headers) as c:
        try:
            with c.stream("GET", url) as resp:
                ctype = resp.headers.get("content-type")
                if resp.status_code != 200:
                    return Fetched(resp.status_code, None, ctype)
                with open_part(part) as fh:  # never through a link planted at `part`
                    for chunk in resp.iter_bytes():
                        fh.write(chunk)
                        digest.update(chunk)
        except NotARegularFile:
            raise  # not ours: the planted thing is left for the user to see
        except BaseException:
            part.unlink(missing_ok=True)
            raise
    return Fetched(200, digest.hexdigest(), ctype)
