"""A run's spend cap (params.yaml `infer.max_spend_usd`): stop sending before it is passed.

Before each request leaves (after a cache miss: a cached reply costs nothing), the runner
holds that request's estimated cost; the request goes only while what this run has spent,
plus what is held for requests in flight, plus it, stays within the cap. A request that
would pass it is not sent: its clip is recorded as not asked (status `failed`, meta
`not_asked: spend cap`), so a rerun with a higher cap asks exactly those clips (failed
clips are what a rerun retries). Once the reply is in, its held estimate gives way to what
it really cost at the entry's prices.

The estimate is the dry run's (agl.inference.estimate): audio seconds x `audio_tokens_per_s`
(default 32, Gemini's documented rate) plus the prompt's characters / 4 in; out,
`est_output_tokens` (default 400), or the model's own output limit where one is set
(`max_tokens`, `max_completion_tokens`, `max_output_tokens`, `max_new_tokens`): the most one
reply can bill. The local executor holds it; a batch job (priced whole by the provider) and
Ray shards (no shared purse) cannot, so a run there with a cap is refused in one line
(agl.inference.model_run._check_spend_cap).

A total over the build (params.yaml `infer.max_total_spend_usd`, one bound for a whole `dvc
repro`): before a run sends anything, the `cost_usd` its records and every other run's records
under `build/runs` and `build/listen` hold is summed (`recorded_spend`, the newest line per clip
of each `predictions.jsonl`), and the same hold refuses a request that would take that sum, plus
what this run has spent and holds, past the total: not asked, as under the run's cap. The sum
reads folders that are no stage's declared deps, so it is a guard, never part of a result: with
no total (null, the default) nothing is read and no byte of any output depends on it.
"""

from __future__ import annotations

import contextvars
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.core.audio import clip_seconds
from agl.core.checks import number_setting

DEFAULT_AUDIO_TOKENS_PER_S = 32.0
DEFAULT_OUTPUT_TOKENS = 400
OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "max_new_tokens")
NOT_ASKED = "spend cap"  # a record's meta `not_asked`
# Where the build's runs record what they spent (infer@ and listen@ stages), from the project
# root a stage runs in.
TOTAL_ROOTS = ("build/runs", "build/listen")


def recorded_spend(roots: Iterable[str | Path]) -> float:
    """USD the records under `roots` say was spent: each `predictions.jsonl`'s newest line per
    clip, its meta `cost_usd` (a line that is not a record adds nothing)."""
    total = 0.0
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("predictions.jsonl")):
            costs: dict[str, float] = {}
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue  # gone or unreadable mid-walk: its run says so itself
            for line in lines:
                try:
                    record = json.loads(line)
                    cost = (record.get("meta") or {}).get("cost_usd")
                    sid = str(record["sample_id"])
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue
                ok = isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost)
                costs[sid] = float(cost) if ok and cost > 0 else 0.0
            total += sum(costs.values())
    return total


def token_rates(settings: dict[str, Any]) -> tuple[float, int]:
    """(audio tokens per second, output tokens per request) a model entry's estimates use:
    its `audio_tokens_per_s` and `est_output_tokens`, checked (the dry run reads the same)."""
    rate = float(number_setting(settings, "audio_tokens_per_s", DEFAULT_AUDIO_TOKENS_PER_S,
                                "nonnegative", "model setting"))
    out = int(number_setting(settings, "est_output_tokens", DEFAULT_OUTPUT_TOKENS, "count0",
                             "model setting"))
    return rate, out


def tokens_for(seconds: float, prompt_text: str, settings: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens a request is estimated to bill."""
    rate, out = token_rates(settings)
    return int(round(seconds * rate + len(prompt_text) / 4)), out


def reply_cost(reply: Reply, price_in_per_m: float, price_out_per_m: float,
               price_audio_in_per_m: float | None = None) -> float:
    """What a reply cost (agl.inference.runner.cost_usd, a record's `cost_usd`): its audio
    tokens (the provider's count) at the audio price where one is set, the rest of its input
    at the input price, its output at the output price."""
    tokens_in = reply.input_tokens or 0
    audio = reply.extra.get("audio_tokens") if price_audio_in_per_m is not None else None
    if isinstance(audio, int) and not isinstance(audio, bool) and 0 <= audio <= tokens_in:
        return ((tokens_in - audio) * price_in_per_m + audio * price_audio_in_per_m
                + (reply.output_tokens or 0) * price_out_per_m) / 1e6
    return (tokens_in * price_in_per_m + (reply.output_tokens or 0) * price_out_per_m) / 1e6


@dataclass
class SpendCap:
    """The run's cap (None: none), the entry's prices and settings, this run's spent and held
    dollars, and the build's total (None: none) with what its records held before this run."""

    cap_usd: float | None
    price_in_per_m: float
    price_out_per_m: float
    settings: dict[str, Any] = field(default_factory=dict)
    price_audio_in_per_m: float | None = None
    total_usd: float | None = None
    recorded_usd: float = 0.0
    spent_usd: float = 0.0
    held_usd: float = 0.0
    not_asked: int = 0

    def estimate_usd(self, request: Request) -> float:
        seconds = 0.0
        if request.audio_path is not None:
            try:
                seconds = clip_seconds(Path(request.audio_path))
            except Exception:  # noqa: BLE001 - soundfile's errors; the probe names the file
                seconds = 0.0
        tokens_in, tokens_out = tokens_for(seconds, (request.system or "") + request.prompt,
                                           self.settings)
        audio_in, _ = tokens_for(seconds, "", self.settings)
        audio_price = (self.price_in_per_m if self.price_audio_in_per_m is None
                       else self.price_audio_in_per_m)
        limits = [int(self.settings[k]) for k in OUTPUT_LIMITS
                  if isinstance(self.settings.get(k), int | float) and self.settings[k] > 0]
        if limits:
            tokens_out = max(limits)
        return ((tokens_in - audio_in) * self.price_in_per_m + audio_in * audio_price
                + tokens_out * self.price_out_per_m) / 1e6

    def hold(self, request: Request) -> float | Reply:
        """The estimate held for `request`, or the not-asked reply when it would pass the cap."""
        est = self.estimate_usd(request)
        run = self.spent_usd + self.held_usd + est
        why = None
        if self.cap_usd is not None and run > self.cap_usd:
            why = (f"infer.max_spend_usd ${self.cap_usd:g} (spent ${self.spent_usd:.4f}, "
                   f"${self.held_usd:.4f} in flight)")
        elif self.total_usd is not None and self.recorded_usd + run > self.total_usd:
            why = (f"infer.max_total_spend_usd ${self.total_usd:g} (the build's records "
                   f"${self.recorded_usd:.4f}, this run ${self.spent_usd:.4f}, "
                   f"${self.held_usd:.4f} in flight)")
        if why is not None:
            self.not_asked += 1
            return Reply(ReplyStatus.FAILED, error=(
                f"not asked: its estimated ${est:.4f} would pass {why}; rerun with a higher "
                "cap to ask it"),
                extra={"attempts": 0, "cached": False, "not_asked": NOT_ASKED})
        self.held_usd += est
        return est

    def settle(self, held: float, reply: Reply) -> None:
        """`reply` is in: its held estimate gives way to what it cost."""
        self.held_usd = max(0.0, self.held_usd - held)
        self.spent_usd += reply_cost(reply, self.price_in_per_m, self.price_out_per_m,
                                     self.price_audio_in_per_m)


# The cap of the run under way in this task (the local executor sets it around the runner's
# stream; each request's task inherits it), as agl.core.reach.REACH: None, no cap.
SPEND: contextvars.ContextVar[SpendCap | None] = contextvars.ContextVar("agl_spend", default=None)
