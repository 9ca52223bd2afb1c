"""Polite, retried, bounded HTTP GETs: the rules every request of the dataset phase follows.

The downloader (`agl.dataset.download`), the crawler, and the manifest and shared-data
fetches all go through here: a User-Agent naming the project; retries with exponential
backoff and jitter on 429, 5xx, timeouts and dropped connections, honouring `Retry-After`
(capped); a 404 or any other 4xx is final. Every read is bounded (`agl.http.client`): a
per-read timeout and a total deadline per request, a size cap on the decoded body (a
document: `max_document_bytes`; a clip: its Archive-listed size, else `max_clip_bytes`),
redirects only within the host and its subdomains (plus `redirect_hosts`). A document that
is an HTML page (an error page served with 200) is retried, never returned. A failure is a
`RetryableError` (another attempt may help) or a `FinalError` (it will not).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agl import __version__
from agl.core.nofollow import open_part
from agl.core.reach import OFFLINE_AFTER, Reach
from agl.core.retry import RETRY_AFTER_CAP_S
from agl.errors import AglError
from agl.http import client as http
from agl.http.client import Limits, Refused, is_html_type, looks_like_html, with_cap

if TYPE_CHECKING:
    import httpx

USER_AGENT = (
    f"agl/{__version__} (AGL1K audio geo-localization benchmark downloader; "
    "polite: parallel jobs are a parameter, retries back off and honour Retry-After)"
)
ARCHIVE_DOWNLOAD_URL = "https://archive.org/download"
ARCHIVE_METADATA_URL = "https://archive.org/metadata"
RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Policy:
    """How hard and how politely to try. `sleep` and `rng` are injectable for tests."""

    base_url: str = ARCHIVE_DOWNLOAD_URL
    metadata_url: str | None = ARCHIVE_METADATA_URL  # None: do not check Archive checksums
    jobs: int = 4
    timeout_s: float = 60.0  # each connect / read / write
    deadline_s: float = 900.0  # one request whole (headers and body), however it trickles
    min_rate_bps: float = 1024.0  # a transfer under this many bytes/s over stall_window_s stalled
    stall_window_s: float = 30.0
    max_document_bytes: int = 20_000_000  # a manifest, a metadata record, a search page
    max_clip_bytes: int = 500_000_000  # a clip whose size the Archive does not list
    redirect_hosts: tuple[str, ...] = ()  # beyond the host itself and its subdomains
    param: str = "download"  # where the bounds are set, named in refusals ("--": CLI flags)
    retries: int = 5  # attempts after the first, per request
    backoff_s: float = 1.0  # first wait; doubles each retry, with +-50% jitter
    max_backoff_s: float = RETRY_AFTER_CAP_S  # also caps a server's Retry-After
    failure_budget: int = 0  # clips allowed to fail before the run fails
    # A new file must decode to at least (1 - tolerance) x the manifest's mp3seconds: a cut
    # transfer that the server reported as whole, or a short file the Archive serves, is
    # caught even where no checksum is listed. None: no duration check.
    duration_tolerance: float | None = 0.1
    user_agent: str = USER_AGENT
    progress: bool = True
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    # Failures to connect, none reaching the server, that stop the download in one line
    # (agl.core.reach); `reach` is the run's count, made by the run (download_clips).
    offline_after: int = OFFLINE_AFTER
    reach: Reach | None = field(default=None, compare=False)


class RetryableError(Exception):
    """A failure worth another attempt (after `wait` seconds if the server said so)."""

    def __init__(self, reason: str, wait: float | None = None):
        super().__init__(reason)
        self.wait = wait


class FinalError(Exception):
    """A failure another attempt will not fix (404, other 4xx, lock mismatch)."""


def limits(policy: Policy) -> Limits:
    """The policy's bounds on one request (`agl.http.client.Limits`)."""
    return Limits(timeout_s=policy.timeout_s, deadline_s=policy.deadline_s,
                  max_bytes=policy.max_document_bytes,
                  redirect_hosts=tuple(policy.redirect_hosts), param=policy.param,
                  min_rate_bps=policy.min_rate_bps or None, stall_window_s=policy.stall_window_s)


def make_client(policy: Policy) -> httpx.Client:
    """A bounded httpx client with the policy's User-Agent, bounds and connection limit.
    Redirects are followed within the host and its subdomains: archive.org/download
    redirects to a storage node (ia800.us.archive.org)."""
    return http.client(limits(policy), headers={"User-Agent": policy.user_agent},
                       max_connections=max(policy.jobs, 1) + 2)


def refused(exc: Refused) -> RetryableError | FinalError:
    """A bound's refusal as this module's failure: a deadline or an error page is retried,
    a size cap or a redirect is not."""
    return RetryableError(str(exc)) if exc.retryable else FinalError(str(exc))


def transport_error(exc: Exception) -> RetryableError | FinalError:
    """An httpx failure as this module's: timeouts and dropped connections are retried;
    anything else (too many redirects, an invalid URL) is final."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return RetryableError(f"timeout ({type(exc).__name__})")
    if isinstance(exc, httpx.TransportError):
        return RetryableError(f"connection error ({type(exc).__name__}: {exc})")
    return FinalError(f"{type(exc).__name__}: {exc}")


def with_retries(attempt: Callable[[], int], policy: Policy, stop: threading.Event) -> int:
    """`attempt()` until it succeeds, retrying `RetryableError`s with the policy's backoff
    (or the server's Retry-After, capped at `max_backoff_s`); the last error is raised."""
    for n in range(policy.retries + 1):
        try:
            done = attempt()
        except FinalError:
            if policy.reach is not None:
                policy.reach.connected()  # a 404 is the server's answer
            raise
        except RetryableError as exc:
            if policy.reach is not None:
                policy.reach.failed(exc)  # offline: NoNetwork after offline_after, not hours
            if n == policy.retries or stop.is_set():
                raise
            backoff = min(policy.max_backoff_s, policy.backoff_s * 2**n)
            wait = backoff * policy.rng.uniform(0.5, 1.5)
            if exc.wait is not None:
                wait = min(policy.max_backoff_s, max(exc.wait, 0.0))  # the server's word
            policy.sleep(wait)
        else:
            if policy.reach is not None:
                policy.reach.connected()
            return done
    raise AssertionError("unreachable")


def raise_for_status(resp: httpx.Response) -> None:
    """Nothing for a success; `RetryableError` for 408/425/429/5xx, `FinalError` for the rest."""
    code = resp.status_code
    if code < 400:
        return
    if code in RETRYABLE or code >= 500:
        raise RetryableError(f"HTTP {code}", wait=retry_after_s(resp.headers.get("Retry-After")))
    if code in (404, 410):
        raise FinalError(f"not found (HTTP {code}) at {resp.request.url}")
    raise FinalError(f"HTTP {code} at {resp.request.url}")


def retry_after_s(value: str | None) -> float | None:
    """`Retry-After` as seconds: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def get_bytes(client: httpx.Client, url: str, policy: Policy, stop=None) -> bytes:
    """A small document (a manifest, a metadata record), with the same retry rules, at most
    `max_document_bytes`; an HTML page served as a success is retried, never returned."""
    import httpx  # imported where used: only the commands that fetch pay its import time

    stop = stop or threading.Event()

    def attempt() -> bytes:
        try:
            resp = client.get(url, extensions=with_cap(
                policy.max_document_bytes, limits(policy).name("max_document_bytes")))
        except Refused as exc:
            raise refused(exc) from None
        except httpx.HTTPError as exc:
            raise transport_error(exc) from None
        raise_for_status(resp)
        if is_html_type(resp.headers.get("content-type")) or looks_like_html(resp.content):
            raise RetryableError(f"an HTML page with status {resp.status_code}, not the "
                                 "document (an error page served as a success)")
        return resp.content

    box: list[bytes] = []
    with_retries(lambda: box.append(attempt()) or 0, policy, stop)
    return box[0]


def get_json(client: httpx.Client, url: str, policy: Policy, stop=None) -> object:
    """A small JSON document by URL (`get_bytes`); `FinalError` when it is not JSON."""
    try:
        return json.loads(get_bytes(client, url, policy, stop))
    except ValueError:
        raise FinalError(f"{url}: not JSON") from None


def fetch_document(url: str, policy: Policy, client: httpx.Client | None = None) -> bytes:
    """A small document by URL, raising AglError with the reason when it cannot be had."""
    own = client is None
    client = client or make_client(policy)
    try:
        return get_bytes(client, url, policy)
    except (FinalError, RetryableError) as exc:
        raise AglError(f"{url}: {exc}; check the URL and your connection, then rerun") from None
    finally:
        if own:
            client.close()


def fetch_to_file(url: str, part: Path, policy: Policy, client: httpx.Client | None = None,
                  max_bytes: int | None = None) -> str:
    """The file at `url` streamed into `part` (never held in memory), with the retry rules
    and bounds, at most `max_bytes` (default `max_document_bytes`); its SHA-256. An HTML
    page served as a success is retried and never left in `part`. Raises AglError."""
    import httpx

    own = client is None
    client = client or make_client(policy)
    cap = max_bytes if max_bytes is not None else policy.max_document_bytes
    cap_name = None if max_bytes is not None else limits(policy).name("max_document_bytes")

    def attempt() -> str:
        digest = hashlib.sha256()
        try:
            with client.stream("GET", url, extensions=with_cap(cap, cap_name)) as resp:
                raise_for_status(resp)
                if is_html_type(resp.headers.get("content-type")):
                    raise RetryableError(f"an HTML page with status {resp.status_code}, "
                                         "not the file (an error page served as a success)")
                with open_part(part) as fh:  # never through a link planted at `part`
                    for chunk in resp.iter_bytes():
                        if not fh.tell() and looks_like_html(chunk):
                            raise RetryableError("an HTML page, not the file (an error page "
                                                 "served as a success)")
                        fh.write(chunk)
                        digest.update(chunk)
                    fh.flush()
                    os.fsync(fh.fileno())
        except Refused as exc:
            raise refused(exc) from None
        except httpx.HTTPError as exc:
            raise transport_error(exc) from None
        return digest.hexdigest()

    part.parent.mkdir(parents=True, exist_ok=True)
    box: list[str] = []
    try:
        with_retries(lambda: box.append(attempt()) or 0, policy, threading.Event())
    except (FinalError, RetryableError) as exc:
        part.unlink(missing_ok=True)  # nothing of a refused reply stays on disk
        raise AglError(f"{url}: {exc}; check the URL and your connection, then rerun") from None
    finally:
        if own:
            client.close()
    return box[0]


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data` as 64 hex digits."""
    return hashlib.sha256(data).hexdigest()
