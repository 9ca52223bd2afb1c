"""One reply as a durable prediction record: what every record of a run shares, and the
conversion (parse, refusal, failure; costs; no secret and no non-finite number kept).

Used by the run driver's sink (agl.inference.sink) for every executor's answers, so a reply
becomes the same record whichever way it came (synchronous, cache, batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agl.backends.base import Backend
from agl.contracts.calls import Reply, ReplyStatus
from agl.contracts.models import ModelSpec
from agl.core.secrets import scrub
from agl.inference.runner import cost_usd
from agl.predictions.parse import parse_reply
from agl.predictions.records import Prediction, Status, without_non_finite
from agl.prompts import Prompt


@dataclass(frozen=True)
class RunContext:
    """What every record and the summary of one run share."""

    spec: ModelSpec
    prompt: Prompt
    fingerprint: str
    pred_path: Path
    progress: bool
    # Whether each clip went out as published, container tags included (agl.inference.
    # model_run.sends_tags): marked on every record and in the run's summary.
    tags_sent: bool = False


def make_prediction(sid: str, reply: Reply, backend: Backend, ctx: RunContext,
                secrets: list[str]) -> Prediction:
    """The durable record of one reply: non-finite numbers are missing values, and no
    field (reply text, reasoning, error, meta) carries a secret."""
    pred = raw_prediction(sid, reply, backend, ctx)
    pred = without_non_finite(pred)
    if secrets:
        pred = Prediction.from_json(scrub(pred.to_json(), secrets))
    return pred


def heard_reported(reply: Reply, backend: Backend) -> float | None:
    """The seconds of audio the provider says it heard: its count of audio tokens
    (`extra["audio_tokens"]`: Gemini's AUDIO prompt tokens, OpenAI's `audio_tokens`) over the
    model's tokens per second (the setting `audio_tokens_per_s`, else the backend's rate;
    Gemini documents 32). None where the provider counts none."""
    tokens = reply.extra.get("audio_tokens")
    rate = backend.settings.get("audio_tokens_per_s") or backend.audio_tokens_per_s
    if tokens is None or not rate or isinstance(tokens, bool):
        return None
    return round(float(tokens) / float(rate), 3)


_PLACE = ("latitude", "longitude", "city", "country", "continent")


def truncated(sid: str, reply: Reply, meta: dict) -> Prediction:
    """A reply cut at the output limit: the fields its text holds (what the authors' parser
    would have read), under status `truncated` with the stop reason in words."""
    from dataclasses import replace

    why = f"reply cut at the output limit (finish_reason {reply.extra.get('finish_reason')})"
    if not (reply.text or "").strip():
        return Prediction(sid, Status.TRUNCATED, raw_reply=reply.text, error=why,
                          missing=_PLACE, meta=meta)
    try:
        read = parse_reply(sid, reply.text, **meta)
    except Exception:  # as for an answer: a parser bug costs one clip's fields, not the run
        return Prediction(sid, Status.TRUNCATED, raw_reply=reply.text, error=why,
                          missing=_PLACE, meta=meta)
    return replace(read, status=Status.TRUNCATED, error=why,
                   missing=read.missing if read.status is not Status.UNPARSEABLE else _PLACE)


def raw_prediction(sid: str, reply: Reply, backend: Backend, ctx: RunContext) -> Prediction:
    meta = {
        "backend": backend.name, "model": backend.model,
        "latency_s": reply.latency_s, "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
        "cost_usd": cost_usd(reply, ctx.spec.price_in_per_m, ctx.spec.price_out_per_m,
                             ctx.spec.price_audio_in_per_m),
        "prompt": ctx.prompt.name, "prompt_sha256": ctx.prompt.sha256,
        "run_fingerprint": ctx.fingerprint, **reply.extra,
    }
    reported = heard_reported(reply, backend)
    if reported is not None:
        meta["heard_s_reported"] = reported
    if ctx.tags_sent:
        meta["audio_tags_sent"] = True
    meta["attempts"] = reply.extra.get("attempts", 1)
    meta["cached"] = bool(reply.extra.get("cached", False))
    served = meta.pop("prediction", None)
    if served is not None:  # replay: a ready prediction, not text to parse
        return Prediction.from_json(served).with_meta(**meta)
    if reply.status is ReplyStatus.OK:
        try:
            return parse_reply(sid, reply.text, **meta)
        except Exception as exc:  # a parser bug on hostile text costs one clip, not the run
            return Prediction(sid, Status.UNPARSEABLE, raw_reply=reply.text,
                              error=f"reply could not be parsed ({type(exc).__name__}: "
                                    f"{str(exc)[:200]})",
                              missing=("latitude", "longitude", "city", "country", "continent"),
                              meta=meta)
    if reply.status is ReplyStatus.TRUNCATED:
        return truncated(sid, reply, meta)
    if reply.status is ReplyStatus.REFUSED:
        return Prediction(sid, Status.REFUSED, raw_reply=reply.text, refused=True,
                          missing=("latitude", "longitude", "city", "country", "continent"),
                          meta=meta)
    return Prediction(sid, Status.FAILED, error=reply.error, meta=meta)
