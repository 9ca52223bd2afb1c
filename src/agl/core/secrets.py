"""Every secret the run knows, and scrubbing it out of every text the project writes.

A key can come back from anywhere: a server that echoes it in an error body, in the reply
text a model writes, in a header that ends up in an exception message. So the rule is not
"redact error messages" but "no text leaves this process with a key in it": predictions,
cache entries, summaries, the canonical writers (`agl.core.canonical`), MLflow
params/tags/artifacts, telemetry and every line on stdout/stderr (`scrubbed_output`) all
pass through `scrub` / `scrub_text`.

The secrets are the values of environment variables whose names look like credentials
(`*_API_KEY`, `*_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, ...), plus any variable a
backend's settings name with a `*_env` setting (`api_key_env`, `base_url_env`), plus the
credentials inside any URL among those values or the environment (`http://user:pw@host`:
`pw`, `user:pw` and its Base64 form, which is what HTTP Basic auth sends; `?api-key=K`:
`K`). Values shorter than 8 characters are left out: they would also match ordinary words
and numbers, and no real API key is that short. Independently of what is known, any URL in
any text loses its userinfo and the values of key-like query parameters (`[redacted]`).

Configuration never holds a credential (`check_config`): a key-like setting name at any
depth, or a URL with userinfo or a key-like query parameter, is refused with one line naming
the field and the variable to use instead. params.yaml is copied into dvc.lock, MLflow
params and experiment tables; a value there cannot be scrubbed back out.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from agl.errors import AglError

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8
# Environment variable names that hold credentials.
_NAME = re.compile(r"(API_?KEY|_KEY$|TOKEN$|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)
# Setting (and header, query parameter) names that hold credentials: `openai_api_key`,
# `x-api-key`, `Authorization`, `access_token`, `client_secret`, `key`; not `max_tokens`,
# `tokenizer` or `authors`.
KEY_NAME = re.compile(
    r"(api[_-]?key|secret|token(?!s|iz)|password|passwd|credential|auth(?!or(?!iz))|cookie"
    r"|(^|[_-])key$)", re.I
)
# Query parameters that carry a key without a key-like name (signed URLs).
_QUERY_KEYS = frozenset({"sig", "signature", "code", "x-amz-signature", "x-goog-signature"})
# userinfo: `scheme://user:pass@` up to the host; never across '/', whitespace or quotes.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,20}://)([^/?#@\s\"'<>]+@)")
_QUERY = re.compile(r"([?&;])([^=&;#\s\"'<>]{1,64})=([^&;#\s\"'<>]+)")


def looks_like_key(name: str) -> bool:
    """A setting/header/parameter name that holds a credential (`*_env` names a variable)."""
    return bool(KEY_NAME.search(name)) and not name.endswith("_env")


def _key_query(name: str) -> bool:
    return looks_like_key(unquote(name)) or unquote(name).lower() in _QUERY_KEYS


def url_credentials(url: str) -> list[str]:
    """What in `url` is a credential: userinfo (whole, and its parts and Basic-auth form)
    and the values of key-like query parameters. Empty for an ordinary URL."""
    if "://" not in url:
        return []
    try:
        parts = urlsplit(url.strip())
        user, password = parts.username, parts.password
    except ValueError:
        return []
    found: list[str] = []
    if user is not None or password is not None:
        user, password = unquote(user or ""), unquote(password or "")
        pair = f"{user}:{password}"
        found += [pair, base64.b64encode(pair.encode()).decode(), password, user]
        raw = parts.netloc.rsplit("@", 1)[0]
        found.append(raw)
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if _key_query(name):
            found.append(value)
    return [f for f in found if f]


def strip_url_credentials(text: str) -> str:
    """`text` with every URL's userinfo and key-like query values replaced by [redacted]."""
    if "://" in text:
        text = _USERINFO.sub(lambda m: m[1] + REDACTED + "@", text)
    if "=" in text:
        text = _QUERY.sub(lambda m: f"{m[1]}{m[2]}={REDACTED}" if _key_query(m[2]) else m[0],
                          text)
    return text


def _register(values: Iterable[str]) -> None:
    _SEEN.update(v for v in values if len(v) >= MIN_SECRET_LEN)


_SEEN: set[str] = set()  # secrets found through settings: known to every later scrub


def _walk_env_names(settings: Any) -> Iterator[str]:
    if isinstance(settings, dict):
        for k, v in settings.items():
            if isinstance(k, str) and k.endswith("_env") and isinstance(v, str):
                yield v
            else:
                yield from _walk_env_names(v)
    elif isinstance(settings, list):
        for v in settings:
            yield from _walk_env_names(v)


def _walk_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _walk_strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _walk_strings(v)


def environ() -> dict[str, str]:
    """A snapshot of os.environ. Reading it is not atomic: another thread may unset a variable
    meanwhile (MLflow's telemetry thread does, as a process ends), which raised KeyError from
    a plain read. Such a read is retried."""
    for _ in range(100):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):  # a key gone between listing and reading it
            continue
    return dict(os.environ)


def known_secrets(settings: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> list[str]:
    """Secret values known to this process, longest first (so a key that contains another
    is replaced whole)."""
    env = environ() if env is None else env
    names = {k for k in env if _NAME.search(k)} | set(_walk_env_names(settings or {}))
    values = {env[n] for n in names if env.get(n)}
    # Credentials inside URLs: in any variable (a proxy, a base URL) and in the settings.
    for text in (*env.values(), *_walk_strings(settings or {})):
        if "://" in text:
            values.update(url_credentials(text))
    found = {v for v in values if len(v) >= MIN_SECRET_LEN}
    if settings:
        _register(found)
    found |= _SEEN
    return sorted(found, key=len, reverse=True)


def scrub_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with every known secret (or the given ones) replaced by a redaction marker."""
    for s in known_secrets() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return strip_url_credentials(text)


def scrub(value: Any, secrets: Iterable[str] | None = None) -> Any:
    """`value` with every known secret replaced by `[redacted]`, in strings at any depth
    (dict keys included), and every URL stripped of its credentials; other values unchanged."""
    found = list(known_secrets() if secrets is None else secrets)

    def clean(v: Any) -> Any:
        if isinstance(v, str):
            return scrub_text(v, found)
        if isinstance(v, dict):
            return {clean(k): clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return type(v)(clean(x) for x in v)
        return v

    return clean(value)


def contains_secret(text: str | bytes, secrets: Iterable[str] | None = None) -> bool:
    """Whether `text` holds a known secret or a URL with credentials (see `scrub_text`)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if any(s.encode() in data for s in (known_secrets() if secrets is None else secrets)):
        return True
    decoded = data.decode("utf-8", "surrogateescape")
    return strip_url_credentials(decoded) != decoded


# --- configuration never holds a credential -------------------------------------------------


def check_config(doc: Any, source: str, prefix: str = "") -> None:
    """Refuse (AglError, one line) a key-like name at any depth of `doc`, or a URL holding
    userinfo or a key-like query parameter: `<source>: <prefix><field>: what to do`."""
    for path, problem in _config_problems(doc, prefix):
        raise AglError(f"{source}: {path or '(top)'}: {problem}")


def _config_problems(node: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            name = str(k)
            here = f"{path}.{name}" if path else name
            if looks_like_key(name):
                yield here, ("a key-like setting; keys never go in params.yaml or on the "
                             "command line (dvc.lock, MLflow and shell history keep them): put "
                             "the key in an environment variable and name it with api_key_env")
            yield from _config_problems(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _config_problems(v, f"{path}[{i}]")
    elif isinstance(node, str) and "://" in node and url_credentials(node):
        what = "user:password@" if _USERINFO.search(node) else "a key in its query"
        yield path, (f"the URL carries a credential ({what}); keys never go in params.yaml "
                     "or on the command line (dvc.lock, MLflow and shell history keep them): "
                     "put the key in an environment variable named by api_key_env, or the "
                     "whole URL in one named by base_url_env")


# --- every line printed ----------------------------------------------------------------------


class _ScrubbingStream(io.TextIOBase):
    """A text stream that scrubs each write before passing it on (see `scrubbed_output`)."""

    def __init__(self, inner: Any, name: str):
        self._inner = inner
        self._name = name  # "stdout" or "stderr"
        self._retired = False

    def retire(self) -> None:
        """The block that made this wrapper ended. Whoever kept it (DVC binds its log handlers
        to the sys.stdout of the moment `dvc` is first imported) now writes to the process's
        current stream, still scrubbed: the stream it wrapped may be closed by then (pytest
        closes each test's capture file), and DVC's handler raised on the next log line."""
        self._retired = True

    @property
    def _target(self) -> Any:
        if self._retired:
            now = getattr(sys, self._name)
            if now is not self:
                return now
        return self._inner

    def write(self, s: str) -> int:
        self._target.write(scrub_text(s))
        return len(s)

    def flush(self) -> None:
        if not self.closed:
            self._target.flush()

    @property
    def closed(self) -> bool:  # type: ignore[override]
        # The target's: an exit handler that kept this wrapper (colorama's reset, a log
        # handler) checks `closed` before writing; io.TextIOBase's own would say False forever,
        # and the write to a stream pytest (say) already closed printed a traceback at exit.
        return bool(getattr(self._target, "closed", False))

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def scrub_output() -> None:
    """From now on everything written to sys.stdout and sys.stderr (prints, warnings,
    progress bars, tracebacks, log handlers created later) is scrubbed first. For a process
    that is agl's alone (a stage script); the CLI uses `scrubbed_output`."""
    if not isinstance(sys.stdout, _ScrubbingStream):
        sys.stdout = _ScrubbingStream(sys.stdout, "stdout")
    if not isinstance(sys.stderr, _ScrubbingStream):
        sys.stderr = _ScrubbingStream(sys.stderr, "stderr")


@contextlib.contextmanager
def scrubbed_output() -> Iterator[None]:
    """`scrub_output` until the block ends (then the streams are put back)."""
    saved = sys.stdout, sys.stderr
    scrub_output()
    made = [s for s in (sys.stdout, sys.stderr) if s not in saved]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        for stream in made:
            stream.retire()
