"""The batch settings of a model entry, validated into one record.

    settings:
      mode: batch            # sync (default) | batch; `agl infer --batch` sets it
      batch:                 # all optional
        probe: true          # a two-request probe job first (does the provider take this
                             # model with audio in batch?); false: submit everything at once
        fallback: sync       # where a clip goes whose batch request failed, or whose job
                             # expired / was cancelled / failed: sync | batch (a new job)
        max_attempts: 2      # fallback: batch: batch jobs a clip may be in, then sync
        max_requests: null   # requests per job (null: the provider's limit)
        max_bytes: null      # bytes per request file (null: the provider's limit, less a margin)
        inline_max_bytes: 15000000  # gemini: requests up to this size go inline, else a file
        max_age_h: 48        # a job still unfinished this long after submission is cancelled
                             # (its answered clips are kept, the rest fall back)
        price_factor: 0.5    # batch price / synchronous price (both providers: 50%)
        result_tries: 3      # passes that may fail to read a finished job's results (a result
                             # file the provider lost answers 404 for ever); then its clips
                             # fall back like an expired job's

None of these change a reply, so none enters the cache key or the run fingerprint
(`agl.inference.cache._NOT_GENERATION`): a batch run and a synchronous run share records and cache.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from agl.core.checks import number_setting
from agl.errors import AglError

BATCH_BACKENDS = ("gemini", "openai")
STATE_FILE = "batch_state.json"

# Each provider's documented limits, less a margin for the JSONL framing and for the
# provider's own accounting (MB vs MiB): OpenAI: 50,000 requests and 200 MB per input file.
# Gemini documents no request count; a file input is bounded by the Files API (2 GB per
# file); agl caps a job at 50,000 requests so that one failed job never holds more.
PROVIDER_LIMITS = {
    "openai": {"max_requests": 50_000, "max_bytes": 190_000_000},
    "gemini": {"max_requests": 50_000, "max_bytes": 1_900_000_000},
}


@dataclass(frozen=True)
class BatchOptions:
    probe: bool = True
    fallback: str = "sync"
    max_attempts: int = 2
    max_requests: int | None = None
    max_bytes: int | None = None
    inline_max_bytes: int = 15_000_000
    max_age_h: float = 48.0
    price_factor: float = 0.5
    result_tries: int = 3

    def limits(self, backend: str) -> tuple[int, int]:
        """(requests, bytes) per job for this provider."""
        base = PROVIDER_LIMITS[backend]
        return (int(self.max_requests or base["max_requests"]),
                int(self.max_bytes or base["max_bytes"]))


# Each number of `settings.batch`, with its rule (agl.core.checks.RULES).
_RULES = {"max_attempts": "count", "max_requests": "count_or_null", "max_bytes": "count_or_null",
          "inline_max_bytes": "count0", "result_tries": "count", "max_age_h": "nonnegative",
          "price_factor": "nonnegative"}


def is_batch(settings: dict[str, Any] | None) -> bool:
    """Whether a model entry asks for batch mode (`mode: batch`)."""
    mode = (settings or {}).get("mode", "sync")
    if mode not in ("sync", "batch"):
        raise AglError(f"settings.mode: '{mode}' is not a mode; use sync or batch")
    return mode == "batch"


def batch_options(backend: str, settings: dict[str, Any] | None) -> BatchOptions:
    """The validated `settings.batch` of a batch-mode entry; one-line errors name the key."""
    if backend not in BATCH_BACKENDS:
        raise AglError(f"settings.mode: batch is for the {' and '.join(BATCH_BACKENDS)} "
                       f"backends, not '{backend}' (its service has no batch API agl uses)")
    raw = (settings or {}).get("batch") or {}
    if not isinstance(raw, dict):
        raise AglError("settings.batch: expected a mapping (probe, fallback, max_requests, ...)")
    known = {f.name for f in fields(BatchOptions)}
    unknown = set(raw) - known
    if unknown:
        raise AglError(f"settings.batch: unknown key(s) {', '.join(sorted(unknown))}; known: "
                       f"{', '.join(sorted(known))}")
    opts = BatchOptions(**raw)
    if not isinstance(opts.probe, bool):
        raise AglError("settings.batch.probe: true or false")
    if opts.fallback not in ("sync", "batch"):
        raise AglError(f"settings.batch.fallback: '{opts.fallback}'; use sync or batch")
    defaults = BatchOptions()
    for name, rule in _RULES.items():  # one line each, with the default as the example
        number_setting(raw, name, getattr(defaults, name), rule, "settings.batch")
    return opts


def price_line(backend: str, settings: dict[str, Any] | None, cost_usd: float) -> str | None:
    """The dry run's second price: what the same requests cost through the batch API."""
    if backend not in BATCH_BACKENDS:
        return None
    factor = batch_options(backend, {**(settings or {}), "mode": "batch"}).price_factor
    mode = "batch" if is_batch(settings) else "sync"
    return (f"${cost_usd:.4f} synchronously, ${cost_usd * factor:.4f} through the batch API "
            f"(x{factor:g}); this run is mode {mode}")
