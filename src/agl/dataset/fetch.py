"""Polite, retried HTTP GETs: the rules every request of the dataset phase follows.

The downloader (`agl.dataset.download`), the crawler, and the manifest and shared-data
fetches all go through here: a User-Agent naming the project; retries with exponential
backoff and jitter on 429, 5xx, timeouts and dropped connections, honouring `Retry-After`
(capped); a 404 or any other 4xx is final. A failure is a `RetryableError` (another attempt
may help) or a `FinalError` (it will not).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agl import __version__
from agl.core.retry import RETRY_AFTER_CAP_S
from agl.errors import AglError

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
    timeout_s: float = 60.0
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


class RetryableError(Exception):
    """A failure worth another attempt (after `wait` seconds if the server said so)."""

    def __init__(self, reason: str, wait: float | None = None):
        super().__init__(reason)
        self.wait = wait


class FinalError(Exception):
    """A failure another attempt will not fix (404, other 4xx, lock mismatch)."""


def make_client(policy: Policy) -> httpx.Client:
    """An httpx client with the policy's User-Agent, timeout and connection limit."""
    import httpx  # imported where used: only the commands that fetch pay its import time

    return httpx.Client(
        headers={"User-Agent": policy.user_agent},
        timeout=httpx.Timeout(policy.timeout_s),
        follow_redirects=True,  # archive.org/download redirects to the storage node
        limits=httpx.Limits(max_connections=max(policy.jobs, 1) + 2),
    )


def with_retries(attempt: Callable[[], int], policy: Policy, stop: threading.Event) -> int:
    """`attempt()` until it succeeds, retrying `RetryableError`s with the policy's backoff
    (or the server's Retry-After, capped at `max_backoff_s`); the last error is raised."""
    for n in range(policy.retries + 1):
        try:
            return attempt()
        except RetryableError as exc:
            if n == policy.retries or stop.is_set():
                raise
            backoff = min(policy.max_backoff_s, policy.backoff_s * 2**n)
            wait = backoff * policy.rng.uniform(0.5, 1.5)
            if exc.wait is not None:
                wait = min(policy.max_backoff_s, max(exc.wait, 0.0))  # the server's word
            policy.sleep(wait)
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
    """A small document (a manifest, a metadata record), with the same retry rules."""
    import httpx  # imported where used: only the commands that fetch pay its import time

    stop = stop or threading.Event()

    def attempt() -> bytes:
        try:
            resp = client.get(url)
        except httpx.TimeoutException as exc:
            raise RetryableError(f"timeout ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise RetryableError(f"connection error ({type(exc).__name__})") from None
        raise_for_status(resp)
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


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data` as 64 hex digits."""
    return hashlib.sha256(data).hexdigest()
