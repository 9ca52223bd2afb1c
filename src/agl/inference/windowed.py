"""The driver's side of long audio: a clip's windows as requests, each window cut just before
its call, and the windows' answers made the clip's one record.

* `clip_plan`: the windows of one clip (its decoded length; its energy for `low_energy`);
* `window_requests`: one request per window, each with the window's address as its audio
  hash (the clip's SHA-256 and the window: what a cached reply is keyed on);
* `cut_window`: the window's samples as a WAV (16-bit PCM, the file's own rate and
  channels), written to a private temporary file only for the call (`heard`), so a run over
  1,444 clips never holds 30 GB of window files (the runner: agl.inference.runner);
* `WindowSink`: holds each clip's window records until the last one arrives, then hands
  the combined record (agl.inference.window_vote) to the run's sink; a `multi_part`
  request (the windows as audio parts of one prompt: `part_request`) is one answer, recorded
  with its parts (`parts_record`).

WAV because both APIs take it (OpenAI's `input_audio` takes wav or mp3 only), it needs no
encoder (the same bytes on every machine: a window's reply is cached), and it carries no
tags. 16-bit PCM of a decoded MP3 loses nothing the MP3 held.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agl.contracts.calls import Request
from agl.contracts.long_audio import LongAudio
from agl.core.audio import WAV_SUBTYPE, cut_wavs, decode_mono, probe
from agl.core.diskwrite import replace_atomically
from agl.inference.long_audio import Window, covered_s, frame_energy, plan_windows, sent_s
from agl.inference.window_vote import combined_prediction
from agl.predictions.records import Prediction, Status


@dataclass(frozen=True)
class ClipPlan:
    """One clip's windows: its key, decoded length, its file's SHA-256 (freshness) and the
    windows in time order (or why the clip cannot be cut: `error`)."""

    key: str
    audio_s: float
    audio_sha256: str | None
    windows: tuple[Window, ...]
    error: str | None = None


def clip_plan(key: str, path: Path, audio_sha256: str | None, cfg: LongAudio) -> ClipPlan:
    """The windows of one clip under `cfg`: its length as decoded (a header may claim more),
    and for `low_energy` its energy curve; a clip that does not decode is an `error`."""
    try:
        if cfg.split == "low_energy":
            mono, sr = decode_mono(path)
            seconds, energy = len(mono) / sr, frame_energy(mono, sr)
        else:
            got = probe(path)
            if not got.ok:
                return ClipPlan(key, 0.0, audio_sha256, (), error=f"unusable audio, not requested: {got.reason}")
            seconds, energy = float(got.seconds or 0.0), None
    except Exception as exc:  # noqa: BLE001 - soundfile raises several kinds; the clip fails, not the run
        return ClipPlan(key, 0.0, audio_sha256, (), error=f"cannot decode {path.name}: {exc}")
    if seconds <= 0:
        return ClipPlan(key, 0.0, audio_sha256, (), error=f"unusable audio, not requested: {path.name} is empty")
    return ClipPlan(key, round(seconds, 3), audio_sha256,
                    tuple(plan_windows(seconds, cfg, key=key, energy=energy)))


def window_address(audio_sha256: str | None, window: Window) -> str:
    """A window's content address: the clip's bytes and the seconds cut from them (the same
    clip and window always make the same WAV)."""
    blob = f"{audio_sha256}:{window.start_s:.3f}:{window.end_s:.3f}:wav-{WAV_SUBTYPE}"
    return hashlib.sha256(blob.encode()).hexdigest()


def window_requests(base: Request, plan: ClipPlan) -> list[Request]:
    """`base` (the clip's request) once per window, each addressed by its window. A clip whose
    one window is the whole clip (no longer than `window_s`) is sent as the file itself, as a
    native run sends it: the same bytes (no decode and re-encode to tell it apart from the
    native run), and the same cached reply."""
    if plan.windows == (Window(0.0, plan.audio_s),):
        return [base]
    return [replace(base, window=(w.start_s, w.end_s), audio_sha256=window_address(plan.audio_sha256, w))
            for w in plan.windows]


def part_request(base: Request, plan: ClipPlan) -> Request:
    """`multi_part`: the clip's windows as audio parts of one request, addressed by them all."""
    address = hashlib.sha256("|".join(window_address(plan.audio_sha256, w) for w in plan.windows)
                             .encode()).hexdigest()
    return replace(base, parts=tuple((w.start_s, w.end_s) for w in plan.windows), audio_sha256=address)


def cut_window(path: Path, start_s: float, end_s: float) -> bytes:
    """Seconds [start_s, end_s) of the file as WAV bytes (16-bit PCM, its rate and channels),
    decoded from the start as the whole-clip path decodes it (agl.core.audio.cut_wavs: the
    same cut a `multi_part` request's parts get)."""
    return cut_wavs(path, [(start_s, end_s)])[0]


@contextlib.asynccontextmanager
async def heard(request: Request) -> AsyncIterator[Request]:
    """The request as the backend sends it: a windowed request's seconds cut into a private
    temporary WAV for the length of the call (removed after), else the request itself."""
    if request.window is None or request.audio_path is None:
        yield request
        return
    import asyncio

    start, end = request.window
    data = await asyncio.to_thread(cut_window, Path(request.audio_path), start, end)
    folder = Path(tempfile.mkdtemp(prefix="agl-window-"))
    path = folder / "audio.wav"  # no clip name leaves the process
    try:
        await asyncio.to_thread(replace_atomically, path, data)
        # `window` stays: a backend that reads the audio itself (knn) knows the file is the cut
        yield replace(request, audio_path=path)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            os.rmdir(folder)


# --- the windows' records, one clip's record -------------------------------------------------

# Per-window figures summed into the clip's record (None when no window gave one).
SUMMED = ("input_tokens", "output_tokens", "cost_usd", "latency_s", "attempts", "thinking_tokens",
          "audio_tokens")
# What a window's record keeps in the clip's `windows` list (volatile timings stay out: they
# would move a DVC-tracked file from run to run).
WINDOW_FIELDS = ("status", "latitude", "longitude", "city", "country", "continent", "confidence",
                 "refused", "error", "reasoning", "raw_reply")
WINDOW_META = ("input_tokens", "output_tokens", "cost_usd", "finish_reason", "thinking_tokens",
               "audio_tokens", "heard_s_reported", "heard_s", "truncated")
# Meta a backend gives per call that describes the window, not the clip (the transformers
# backend's own heard figures; the finish reason): kept per window only.
PER_WINDOW = ("finish_reason", "audio_s", "heard_s", "window_s", "truncated", "heard_s_reported",
              "audio_sha256")


def window_entry(window: Window, pred: Prediction) -> dict[str, Any]:
    """One window's reply kept whole: its seconds, parsed fields, usage and finish reason."""
    out: dict[str, Any] = {"start_s": window.start_s, "end_s": window.end_s}
    out.update({f: getattr(pred, f) for f in WINDOW_FIELDS})
    out["status"] = pred.status.value
    out.update({k: pred.meta[k] for k in WINDOW_META if pred.meta.get(k) is not None})
    return out


def clip_record(plan: ClipPlan, cfg: LongAudio, preds: Sequence[Prediction]) -> Prediction:
    """The clip's record from its windows' records (in time order)."""
    windows = list(plan.windows)
    first = preds[0]
    meta = {k: v for k, v in first.meta.items() if k not in PER_WINDOW}
    for k in SUMMED:
        got = [p.meta[k] for p in preds if p.meta.get(k) is not None]
        if got:
            meta[k] = sum(got)
        else:
            meta.pop(k, None)
    meta["cached"] = all(bool(p.meta.get("cached")) for p in preds)
    reported = [p.meta.get("heard_s_reported") for p in preds]
    # A backend that cuts further (the transformers backend keeps its family's window of
    # each window it is given) says what it kept: the clip is heard where it listened.
    kept = [Window(w.start_s, round(min(w.end_s, w.start_s + float(p.meta["heard_s"])), 3))
            if p.meta.get("heard_s") is not None else w for w, p in zip(windows, preds, strict=True)]
    meta.update({
        "long_audio": cfg.mode,
        "audio_s": plan.audio_s,
        "heard_s": covered_s(kept),
        "sent_s": sent_s(kept),
        "windows": [window_entry(w, p) for w, p in zip(windows, preds, strict=True)],
    })
    if plan.audio_sha256:
        meta["audio_sha256"] = plan.audio_sha256
    if all(r is not None for r in reported):
        meta["heard_s_reported"] = round(sum(reported), 3)
    return combined_prediction(plan.key, preds, meta)


def parts_record(plan: ClipPlan, cfg: LongAudio, pred: Prediction) -> Prediction:
    """A `multi_part` clip's record: the one answer, with the parts sent and what was heard
    of them (the backend's own figure per part where it cuts further)."""
    windows = list(plan.windows)
    heard = pred.meta.get("parts_heard_s")
    if isinstance(heard, list) and len(heard) == len(windows):
        windows = [Window(w.start_s, round(min(w.end_s, w.start_s + float(h)), 3)) for w, h in zip(
            windows, heard, strict=True)]
    meta = {"long_audio": cfg.mode, "audio_s": plan.audio_s, "heard_s": covered_s(windows),
            "sent_s": sent_s(windows), "parts": [[w.start_s, w.end_s] for w in plan.windows]}
    if plan.audio_sha256:
        meta["audio_sha256"] = plan.audio_sha256
    return pred.with_meta(**meta)


def failed_clip(plan: ClipPlan, meta: dict[str, Any]) -> Prediction:
    """The record of a clip that could not be cut (never requested)."""
    return Prediction(plan.key, Status.FAILED, error=plan.error, meta={**meta, "attempts": 0, "cached": False})


class WindowSink:
    """Between the executor and the run's sink (agl.inference.sink.RecordSink): a window's
    answer waits for its clip's other windows; the clip's record goes on when all are in."""

    def __init__(self, sink: Any, plans: dict[str, ClipPlan], cfg: LongAudio):
        self.sink, self.plans, self.cfg = sink, plans, cfg
        self.got: dict[str, dict[tuple[float, float], tuple[Prediction, bool]]] = {}

    async def put(self, answer: Any) -> None:
        request = answer.request
        plan = self.plans[request.sample_id]
        if request.parts:  # multi_part: one answer for the clip
            record = parts_record(plan, self.cfg, self.sink.prediction(answer))
            await self.sink.put_prediction(record, answer.requested_now)
            return
        got = self.got.setdefault(request.sample_id, {})
        span = request.window or (0.0, plan.audio_s)  # the whole clip, sent as its file
        got[span] = (self.sink.prediction(answer), answer.requested_now)
        if len(got) < len(plan.windows):
            return
        del self.got[request.sample_id]
        preds = [got[(w.start_s, w.end_s)][0] for w in plan.windows]
        now = any(n for _, n in got.values())
        await self.sink.put_prediction(clip_record(plan, self.cfg, preds), now)

    async def flush(self) -> None:
        await self.sink.flush()
