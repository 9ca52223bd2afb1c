"""A model run's summary: counts by status, tokens, cost, latencies, this session's totals.

The driver (`agl.inference.model_run`) computes it over the run's records; the tracked part
goes to run_summary.json, the timings beside it (`agl.inference.finalize`).
"""

from __future__ import annotations

import statistics
from typing import Any

from agl.inference.cache import public_settings
from agl.inference.record import RunContext
from agl.inference.window_vote import window_figures
from agl.predictions.records import Prediction, Status


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    s = sorted(values)
    return {"mean": statistics.fmean(s), "p50": statistics.median(s),
            "p95": s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))], "max": s[-1]}


def run_summary(chosen: list[Prediction], n_selected: int, ctx: RunContext, wall: float,
                session: dict[str, float], truth: dict[str, tuple[float, float]] | None = None
                ) -> dict[str, Any]:
    """The run's totals over its records `chosen` (of `n_selected` clips): counts by status,
    tokens, cost, latency and local timings, and this session's requests, hits and spend.
    `truth` (sample_id -> the manifest's lat, lon): a windowed run's summary gains the
    combined, first-window and any-window oracle mean distances (what combining loses)."""
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
        # Marked only where it happened: the clips went out with their files' tags.
        **({"audio_tags_sent": True} if ctx.tags_sent else {}),
        "prompt": prompt.name,
        "prompt_sha256": prompt.sha256,
        "prompt_source": str(prompt.source),
        "run_fingerprint": ctx.fingerprint,
        "price_in_per_m": spec.price_in_per_m,
        "price_out_per_m": spec.price_out_per_m,
        **({"price_audio_in_per_m": spec.price_audio_in_per_m}
           if spec.price_audio_in_per_m is not None else {}),
        "n": n_selected,
        "n_recorded": len(chosen),
        "complete": len(chosen) == n_selected and counts["failed"] == 0,
        # `n_truncated` only where a reply was cut: a run without one keeps its summary's bytes.
        **{f"n_{k}": v for k, v in counts.items() if v or k != Status.TRUNCATED.value},
        "input_tokens": int(total("input_tokens")),
        "output_tokens": int(total("output_tokens")),
        "cost_usd": total("cost_usd"),
        "latency_s": _stats([float(p.meta["latency_s"]) for p in fresh]),
        "cached": sum(1 for p in chosen if p.meta.get("cached")),
        "attempts": int(total("attempts")),
        # Clips the spend cap kept from being sent (agl.inference.spend): only where some were.
        **({"n_not_asked": n} if (n := sum(1 for p in chosen if p.meta.get("not_asked"))) else {}),
        **({f"local_{k}": v for k, v in local.items()} if local["decode_s"]["mean"] else {}),
        **heard_figures(chosen, spec.long_audio.heard_tolerance),
        **({"long_audio": spec.long_audio.protocol()} if spec.long_audio.windowed else {}),
        **({"windows": figures} if (figures := window_figures(chosen, truth)) else {}),
        "wall_s": wall,
        "session_requests": session["requests"],
        "session_cache_hits": session["cache_hits"],
        "session_cost_usd": session["cost_usd"],
    }


def heard_figures(chosen: list[Prediction], tolerance: float) -> dict[str, Any]:
    """What the run's clips were sent and heard (empty where no record says: the offline
    baselines): seconds of audio in the clips, covered by what was sent, and sent; where the
    provider counted audio tokens, the seconds it says it heard, and a flag when a clip's
    reported seconds fall short of those sent by more than `tolerance` (a share): "the server
    heard 30 s of 130" (a server that truncates while billing the whole duration)."""
    rows = [p for p in chosen if p.meta.get("heard_s") is not None]
    if not rows:
        return {}

    def sent(p: Prediction) -> float:
        return float(p.meta.get("sent_s") if p.meta.get("sent_s") is not None else p.meta["heard_s"])

    out: dict[str, Any] = {"heard": {
        "clips": len(rows),
        "audio_s": round(sum(float(p.meta.get("audio_s") or 0) for p in rows), 3),
        "heard_s": round(sum(float(p.meta["heard_s"]) for p in rows), 3),
        "sent_s": round(sum(sent(p) for p in rows), 3),
    }}
    # A local model's processor truncation as set, with the transformers version (every run
    # of the transformers backend says both; other backends neither).
    for key in ("processor_truncation", "transformers_version"):
        values = sorted({p.meta[key] for p in rows if p.meta.get(key) is not None}, key=str)
        if values:
            out["heard"][key] = values
    reported = [p for p in rows if p.meta.get("heard_s_reported") is not None]
    if not reported:
        return out
    short = [p for p in reported if float(p.meta["heard_s_reported"]) < sent(p) * (1 - tolerance)]
    out["heard"].update({"reported_clips": len(reported),
                         "heard_s_reported": round(sum(float(p.meta["heard_s_reported"]) for p in reported), 3),
                         "short_clips": len(short), "tolerance": tolerance})
    if short:
        got = statistics.median(float(p.meta["heard_s_reported"]) for p in short)
        of = statistics.median(sent(p) for p in short)
        out["heard_flag"] = (f"the server heard {got:.0f} s of {of:.0f} (median of {len(short)} of "
                             f"{len(reported)} clip(s) whose reported audio fell short of what was sent "
                             f"by more than {tolerance:.0%}): it may cut long audio")
    return out
