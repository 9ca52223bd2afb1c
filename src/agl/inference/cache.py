"""A content-addressed, crash-safe cache of model replies.

The key is the SHA-256 of everything that decides a reply: backend name, model id, the
normalised generation settings, the prompt's hash, the system prompt's hash and the audio's
SHA-256. Secrets never enter it: settings whose names look like credentials are dropped
before hashing and nothing but the reply is stored, so the cache can be shared or committed
to a DVC remote without leaking a key.

Each entry is one small JSON file `<dir>/<key[:2]>/<key>.json`, written to a temporary file,
fsync'd and renamed into place, so a killed process leaves either the whole entry or none.
Only deterministic, successful replies are cached (the runner decides; see
`agl.inference.runner`): a sampled reply replayed from a cache would not be a fresh sample.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.core import diskwrite
from agl.core.jsonutil import dumps
from agl.core.secrets import KEY_NAME

# Setting names that may hold a credential, and settings that steer the call but not the
# reply (where a file is uploaded, how long to wait, which host serves the model): neither
# belongs in a cache key. The endpoint is transport: a model id is taken to name the same
# weights wherever it is served (a proxy, a vLLM box, a fake server in tests).
_SECRET = KEY_NAME  # one definition: agl.core.secrets
_NOT_GENERATION = frozenset(
    {"api_key_env", "base_url_env", "timeout", "timeout_s", "upload_above_bytes",
     "concurrency", "max_retries", "price_in_per_m", "price_out_per_m", "http_options",
     "base_url", "api_version", "cache", "endpoint_concurrency", "endpoint_backoff_s",
     "endpoint_backoff_cap_s",
     # transformers: where timings go and how long a partial batch waits; `batch_size`
     # stays in the key (bfloat16 kernels may round a padded batch differently).
     "efficiency_log", "batch_wait_s",
     # batch mode (agl.inference.batch): how requests travel, not what they ask.
     "mode", "batch",
     # langprior: where the clips it heard are kept (agl.speech.heard), not what it hears.
     "heard_cache"}
)
CACHE_VERSION = 2


def public_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings with every credential-looking entry removed and URLs stripped of userinfo
    and query strings (where keys are sometimes passed); safe to log, hash and store."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if _SECRET.search(k) and not k.endswith("_env"):
            continue
        out[k] = _public_value(v)
    return out


def _public_value(v: Any) -> Any:
    if isinstance(v, str) and "://" in v:
        return _strip_url(v)
    if isinstance(v, dict):
        return public_settings(v)
    if isinstance(v, list):  # base_url: [url, {url, concurrency}, ...]
        return [_public_value(x) for x in v]
    return v


def _strip_url(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def generation_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings that decide a reply, normalised (sorted keys, JSON types, every number a
    float so that `temperature: 0` and `temperature: 0.0` are one setting)."""
    kept = {k: v for k, v in public_settings(settings).items() if k not in _NOT_GENERATION}
    return _numbers_as_float(json.loads(json.dumps(kept, sort_keys=True, default=str)))


def _numbers_as_float(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, dict):
        return {k: _numbers_as_float(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_numbers_as_float(x) for x in v]
    return v


def sha256_text(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_key(backend: str, model: str, settings: dict[str, Any], request: Request) -> str:
    """The content address of one call. `request.audio_sha256` must be set for audio."""
    if request.audio_path is not None and not request.audio_sha256:
        raise ValueError("a request with audio needs audio_sha256 for its cache key")
    return _key(backend, model, settings, sha256_text(request.prompt), sha256_text(request.system),
                request.audio_sha256, request.sample_id, _marks(request.repeat, request.tags))


def record_key(backend: str, model: str, settings: dict[str, Any], sample_id: str,
               meta: dict[str, Any], repeat: int = 0) -> str:
    """The address a record's reply was cached under, from what the record and its run's
    summary keep (the prompt's hash, the audio's, the settings): `cache_key` without the
    request, for checking a record against its cached reply (agl.inference.audit)."""
    return _key(backend, model, settings, meta.get("prompt_sha256"),
                sha256_text(settings.get("system_prompt")), meta.get("audio_sha256"), sample_id,
                _marks(repeat, bool(meta.get("audio_tags_sent"))))


def _key(backend: str, model: str, settings: dict[str, Any], prompt_sha256: str | None,
         system_sha256: str | None, audio_sha256: str | None, sample_id: str,
         marks: dict[str, Any]) -> str:
    """The one place an address is made, from a request's or a record's hashes."""
    material = {
        "v": CACHE_VERSION,
        "backend": backend,
        "model": model,
        "settings": generation_settings(settings),
        "prompt_sha256": prompt_sha256,
        "system_sha256": system_sha256,
        "audio_sha256": audio_sha256,
        # Without audio, a backend's reply may still depend on the clip (the random
        # baselines draw per clip), so the clip id is part of the address.
        "sample_id": sample_id if audio_sha256 is None else None,
    }
    if audio_sha256 is None:
        marks = {k: v for k, v in marks.items() if k != "tags"}  # no audio, no tags
    return _address({**material, **marks})


def _marks(repeat: int, tags: bool) -> dict[str, Any]:
    """What sets a call apart only where it is set, so an address made before either existed
    stays the same: a repeat past 0, and the audio file sent with its tags (other bytes)."""
    return {**({"repeat": int(repeat)} if repeat else {}), **({"tags": True} if tags else {})}


def _address(material: dict[str, Any]) -> str:
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """One JSON file per key under `root`; `get` returns a Reply or None."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Reply | None:
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # an unreadable entry is a miss; the next `put` replaces it
        if entry.get("v") != CACHE_VERSION:
            return None
        return Reply(
            status=ReplyStatus(entry["status"]),
            text=entry.get("text"),
            input_tokens=entry.get("input_tokens"),
            output_tokens=entry.get("output_tokens"),
            latency_s=entry.get("latency_s"),
            extra=dict(entry.get("extra") or {}),
        )

    def put(self, key: str, reply: Reply) -> None:
        if reply.status is ReplyStatus.FAILED:
            raise ValueError("failed replies are never cached")
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {
            "v": CACHE_VERSION,
            "status": reply.status.value,
            "text": reply.text,
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "latency_s": reply.latency_s,
            "extra": reply.extra,
        }
        diskwrite.write_text(path, dumps(entry, ensure_ascii=False, default=str))

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.exists() else 0
