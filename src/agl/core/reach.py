"""A run that cannot reach its server at all stops in seconds, in one line.

Offline, `agl infer` against an API and `agl download` of AGL1K used to retry every clip with
backoff: two clips took 115 s, and a download showed an ETA of hours. A failure to *connect*
(the name does not resolve, the connection is refused, there is no route) before any request
of the run has reached the server says the network or the host is missing, not that one clip
is unlucky: after `limit` such failures (params.yaml `infer.offline_after`,
`download.offline_after`) the run stops with `NoNetwork`, naming the host. Nothing is recorded
for the clips that failed so, so the same command resumes once the network is back. Once any
request of the run has reached the server, connection failures are a clip's (retried, then
recorded) as before: an outage in the middle of a run is not a missing network.

A timeout is neither: a slow server and a dropped packet look alike.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable

from agl.errors import AglError

OFFLINE_AFTER = 3  # the default of infer.offline_after and download.offline_after
_NO_ROUTE = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL}


class NoNetwork(AglError):
    """The run's server could not be reached at all: the run stops (AglError: one line)."""


def _chain(exc: BaseException | None):
    seen = 0
    while exc is not None and seen < 12:
        yield exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1


def _host(exc: BaseException) -> str | None:
    try:  # httpx's errors raise when asked for a request they were not given
        url = getattr(exc, "request", None).url
    except (AttributeError, RuntimeError):
        return None
    return getattr(url, "host", None) or None


def unreachable(exc: BaseException) -> tuple[str, str] | None:
    """(host, reason) when `exc` (or an error behind it: an SDK wraps httpx, which wraps the
    socket's) is a failure to connect; None for anything else."""
    cause = next((e for e in _chain(exc) if isinstance(e, socket.gaierror | ConnectionRefusedError)
                  or (isinstance(e, OSError) and e.errno in _NO_ROUTE)), None)
    if cause is None:
        return None
    host = next((h for h in map(_host, _chain(exc)) if h), None)
    if isinstance(cause, socket.gaierror):
        reason = "the name does not resolve"
    elif isinstance(cause, ConnectionRefusedError) or cause.errno == errno.ECONNREFUSED:
        reason = "connection refused"
    else:
        reason = "no route to it"
    return host or "its host", f"{reason}: {cause}"


def archive_or_server(host: str) -> str:
    """How a download names the host it could not reach."""
    return "the Archive" if host == "archive.org" or host.endswith(".archive.org") else "the server"


class Reach:
    """Whether a run has reached its server; `failed` raises NoNetwork at the `limit`-th
    failure to connect while none has (thread-safe: download threads share one)."""

    def __init__(self, what: str | Callable[[str], str], limit: int = OFFLINE_AFTER,
                 setting: str = "offline_after"):
        self.what, self.limit, self.setting = what, limit, setting
        self.failures = 0
        self.reached = False
        self._lock = threading.Lock()

    def connected(self) -> None:
        self.reached = True

    def failed(self, exc: BaseException) -> None:
        """Note a failed request: one that failed to connect counts (raising NoNetwork at the
        limit while none has reached the server); a timeout says nothing; any other error
        came from the server, which was reached."""
        if self.reached:
            return
        found = unreachable(exc)
        if found is None:
            if not any(isinstance(e, TimeoutError) or "Timeout" in type(e).__name__ for e in _chain(exc)):
                self.reached = True
            return
        with self._lock:
            self.failures += 1
            if self.failures < self.limit or self.reached:
                return
        host, reason = found
        what = self.what(host) if callable(self.what) else self.what
        raise NoNetwork(f"no network: {what} at {host} cannot be reached ({reason}; "
                        f"{self.failures} attempt(s) failed to connect and none reached it: "
                        f"{self.setting}); nothing was recorded for those clips: run it again when "
                        "the network is back, it resumes where it stopped")
