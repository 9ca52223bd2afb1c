"""A model run's summary: counts by status, tokens, cost, latencies, this session's totals.

The driver (`agl.inference.model_run`) computes it over the run's records; the tracked part
goes to run_summary.json, the timings beside it (`agl.inference.finalize`).
"""

from __future__ import annotations

import statistics
from typing import Any

from agl.inference.cache import public_settings
from agl.inference.record import RunContext
from agl.predictions.records import Prediction, Status


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    s = sorted(values)
    return {"mean": statistics.fmean(s), "p50": statistics.median(s),
            "p95": s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))], "max": s[-1]}


def run_summary(chosen: list[Prediction], n_selected: int, ctx: RunContext, wall: float,
             session: dict[str, float]) -> dict[str, Any]:
    """The run's totals over its records `chosen` (of `n_selected` clips): counts by status,
    tokens, cost, latency and local timings, and this session's requests, hits and spend."""
    counts = {s.value: 0 for s in Status}
    for p in chosen:
        counts[p.status.value] += 1

    def total(field: str) -> float:
        return sum(float(p.meta.get(field) or 0) for p in chosen)

    spec, prompt = ctx.spec, ctx.prompt
    fresh = [p for p in chosen if not p.meta.get("cached") and p.meta.get("latency_s") is not None]
    local = {k: _stats([float(p.meta[k]) for p in chosen if p.meta.get(k) is not None])
             for k in ("prefill_s", "decode_s", "tokens_per_s")}
    return {
        "backend": spec.backend,
        "model": spec.model,
        "settings": public_settings(dict(spec.settings or {})),
        # The roster protocol the entry says it runs (paper / controlled): a param, tracked.
        **({"run_protocol": spec.protocol} if spec.protocol else {}),
        "prompt": prompt.name,
        "prompt_sha256": prompt.sha256,
        "prompt_source": str(prompt.source),
        "run_fingerprint": ctx.fingerprint,
        "price_in_per_m": spec.price_in_per_m,
        "price_out_per_m": spec.price_out_per_m,
        "n": n_selected,
        "n_recorded": len(chosen),
        "complete": len(chosen) == n_selected and counts["failed"] == 0,
        **{f"n_{k}": v for k, v in counts.items()},
        "input_tokens": int(total("input_tokens")),
        "output_tokens": int(total("output_tokens")),
        "cost_usd": total("cost_usd"),
        "latency_s": _stats([float(p.meta["latency_s"]) for p in fresh]),
        "cached": sum(1 for p in chosen if p.meta.get("cached")),
        "attempts": int(total("attempts")),
        **({f"local_{k}": v for k, v in local.items()} if local["decode_s"]["mean"] else {}),
        "wall_s": wall,
        "session_requests": session["requests"],
        "session_cache_hits": session["cache_hits"],
        "session_cost_usd": session["cost_usd"],
    }
