"""How a model hears a clip longer than it can take: the `long_audio:` setting and its windows.

Every AGL1K clip is longer than 30 s (quartiles 104 / 130 / 154 s), and several families read
30 s (Whisper encoders; Gemma-3n). A model entry's `long_audio:` says which protocol a run
uses (docs/inference.md#long-audio):

* `native`: the whole clip in one request (what the backend does with it is its own: the
  `transformers` backend cuts to the family's window and records it);
* `windows`: one request per window of `window_s` seconds, the answers combined on the
  sphere (agl.inference.window_vote);
* `truncate`: one window only: the first `window_s` seconds (`start: first`, the paper's
  behaviour for its 30-s families) or a seeded random one (`start: random`, a control);
* `multi_part`: the windows as several audio parts of one prompt, one answer (a backend
  that can send several parts says so: `Backend.multi_part`).

Windows are planned here, on numbers (a clip's length and, for `split: low_energy`, its
short-time energy), so the rules are tested without audio: `plan_windows`. A tail shorter
than `min_tail_s` is heard by sliding the last window back over it (it overlaps the one
before), never by making a window longer than `window_s`: a 30-s encoder cannot take 40 s.
`split: low_energy` moves each cut back to the quietest point of the `search_s` seconds
before it (as vLLM's `split_audio` does), so a word or a bird's phrase is not cut in two;
a cut never moves later, so no window grows past `window_s`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from agl.contracts.long_audio import NATIVE, LongAudio, parse_long_audio  # noqa: F401 - the setting, re-exported
from agl.errors import AglError

ENERGY_HOP_S = 0.01  # the energy curve's step (10 ms)
ENERGY_FRAME_S = 0.1  # each point's frame: 100 ms of signal, as vLLM's split_audio uses


# --- planning ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Seconds [start_s, end_s) of a clip, rounded to the millisecond (they are recorded)."""

    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return round(self.end_s - self.start_s, 3)


def frame_energy(samples: np.ndarray, sr: int) -> np.ndarray:
    """Mean power of `ENERGY_FRAME_S` of (mono) signal around every `ENERGY_HOP_S` step:
    point i describes the signal around i * ENERGY_HOP_S seconds."""
    x = np.asarray(samples, dtype=np.float64)
    hop = max(1, round(ENERGY_HOP_S * sr))
    half = max(1, round(ENERGY_FRAME_S * sr / 2))
    power = np.concatenate([[0.0], np.cumsum(x * x)])
    centres = np.arange(0, len(x) + 1, hop)
    lo = np.clip(centres - half, 0, len(x))
    hi = np.clip(centres + half, 0, len(x))
    return (power[hi] - power[lo]) / np.maximum(hi - lo, 1)


def random_start(duration_s: float, cfg: LongAudio, key: str) -> float:
    """`start: random`: a start in [0, duration - window_s], drawn from (seed, clip key), so
    a clip's window is the same on every run and machine whatever the manifest order."""
    room = max(0.0, duration_s - cfg.window_s)
    digest = hashlib.sha256(f"{cfg.seed}:{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return round(u * room, 3)


def plan_windows(duration_s: float, cfg: LongAudio, *, key: str = "",
                 energy: np.ndarray | None = None) -> list[Window]:
    """The windows a clip of `duration_s` seconds is heard in under `cfg` (never one longer
    than `window_s`). `energy`: `frame_energy` of the clip, for `split: low_energy`.
    `native`: one window, the whole clip."""
    d = round(float(duration_s), 3)
    if d <= 0:
        raise AglError(f"clip {key}: no audio to plan windows over ({duration_s!r} s)")
    w = cfg.window_s
    if cfg.mode == "native" or d <= w:
        return [Window(0.0, d)]
    if cfg.mode == "truncate":
        start = random_start(d, cfg, key) if cfg.start == "random" else 0.0
        return [Window(start, round(min(d, start + w), 3))]
    out: list[Window] = []
    start = 0.0
    while True:
        end = start + w
        if end >= d:
            tail = d - start
            if out and tail < cfg.min_tail_s:  # slide back over the tail: a full window ending at d
                start = max(0.0, d - w)
            out.append(Window(round(start, 3), d))
            return out
        if cfg.split == "low_energy" and energy is not None:
            end = _quietest(energy, end - cfg.search_s, end)
        out.append(Window(round(start, 3), round(end, 3)))
        start = end - cfg.overlap_s


def _quietest(energy: np.ndarray, lo_s: float, hi_s: float) -> float:
    """The time in [lo_s, hi_s] of the lowest energy point (the latest of equal ones: the
    window loses as little as it can)."""
    lo = max(0, int(np.ceil(lo_s / ENERGY_HOP_S - 1e-9)))
    hi = min(len(energy) - 1, int(np.floor(hi_s / ENERGY_HOP_S + 1e-9)))
    if hi < lo:
        return hi_s
    seg = energy[lo:hi + 1]
    i = int(len(seg) - 1 - np.argmin(seg[::-1]))
    return min(hi_s, (lo + i) * ENERGY_HOP_S)


def covered_s(windows: list[Window]) -> float:
    """Seconds of the clip inside at least one window (overlaps counted once)."""
    total, reach = 0.0, 0.0
    for win in sorted(windows, key=lambda x: x.start_s):
        lo = max(win.start_s, reach)
        if win.end_s > lo:
            total += win.end_s - lo
        reach = max(reach, win.end_s)
    return round(total, 3)


def sent_s(windows: list[Window]) -> float:
    """Seconds of audio sent (overlaps counted each time they are sent: what tokens cost)."""
    return round(sum(w.end_s - w.start_s for w in windows), 3)
