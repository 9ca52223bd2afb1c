"""The driver's side of the executor seam: each answer becomes a durable prediction record.

Group commit off the event loop: every record that arrived while the previous fsync ran goes
out with the next one, so the disk's fsync rate never caps the request rate. A record counts
(progress, this session's totals) once it is durable.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from agl.backends.base import Backend
from agl.core.secrets import known_secrets
from agl.inference.record import RunContext, make_prediction
from agl.inference.work import Answer
from agl.predictions.records import Prediction, PredictionWriter, Status


class RecordSink:
    """Makes each `Answer` a record (parsed, priced, without secrets) and appends it to the
    run's predictions.jsonl (fsync'd); `session` and the progress `bar` count the replies this
    run requested (or read from the cache)."""

    def __init__(self, writer: PredictionWriter, backend: Backend, ctx: RunContext,
                 session: dict[str, float], bar: Any, heard_s: dict[str, float] | None = None):
        self.writer, self.backend, self.ctx, self.session, self.bar = writer, backend, ctx, session, bar
        # Seconds of audio each whole-clip request sends (a served model's: agl.inference.
        # model_run), recorded as `heard_s` where the backend does not measure its own.
        self.heard_s = heard_s or {}
        self.secrets = known_secrets(backend.settings)
        self.buffer: list[tuple[Prediction, bool]] = []
        self.flushing: asyncio.Future | None = None
        self.failures = 0
        self._priced: dict[float, RunContext] = {1.0: ctx}

    def _context(self, factor: float) -> RunContext:
        """The run's context with the model's prices times `factor` (a batch discount)."""
        if factor not in self._priced:
            spec = self.ctx.spec
            self._priced[factor] = replace(self.ctx, spec=replace(
                spec, price_in_per_m=spec.price_in_per_m * factor,
                price_out_per_m=spec.price_out_per_m * factor))
        return self._priced[factor]

    async def put(self, answer: Answer) -> None:
        """Take one answer; written with the next group commit (returns at once)."""
        await self.put_prediction(self.prediction(answer), answer.requested_now)

    def prediction(self, answer: Answer) -> Prediction:
        """The record of one answer: parsed, priced, without secrets, with the audio it heard."""
        request, reply = answer.request, answer.reply
        if request.audio_sha256:  # what the record answers for (freshness)
            reply = replace(reply, extra={**reply.extra, "audio_sha256": request.audio_sha256})
        sent = self.heard_s.get(request.sample_id)
        if sent is not None and "heard_s" not in reply.extra:  # a backend's own figure wins
            reply = replace(reply, extra={**reply.extra, "heard_s": sent})
        return make_prediction(request.sample_id, reply, self.backend,
                               self._context(answer.price_factor), self.secrets)

    async def put_prediction(self, pred: Prediction, requested_now: bool) -> None:
        """Take one record (a windowed clip's, combined: agl.inference.windowed)."""
        self.buffer.append((pred, requested_now))
        if self.flushing is None or self.flushing.done():
            if self.flushing is not None:
                self.flushing.result()  # a failed write stops the run
            self.flushing = asyncio.ensure_future(self._write())

    async def flush(self) -> None:
        """Return once every answer put so far is durable."""
        while self.flushing is not None and not self.flushing.done():
            await self.flushing
        if self.flushing is not None:
            self.flushing.result()
        self.flushing = asyncio.ensure_future(self._write())
        await self.flushing

    async def _write(self) -> None:
        while self.buffer:
            batch = self.buffer[:]
            self.buffer.clear()
            await asyncio.to_thread(self.writer.write_many, [p for p, _ in batch])
            counted = [p for p, now in batch if now]
            for pred in counted:
                self.session["requests"] += pred.meta["attempts"]
                self.session["cache_hits"] += pred.meta["cached"]
                self.failures += pred.status is Status.FAILED
                self.session["cost_usd"] += 0.0 if pred.meta["cached"] else pred.meta["cost_usd"]
            self.bar.set_postfix_str(f"failed={self.failures} spend=${self.session['cost_usd']:.4f}",
                                     refresh=False)
            self.bar.update(len(counted))
