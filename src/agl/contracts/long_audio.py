"""A model entry's `long_audio:`: how a model hears a clip longer than it can take.

The setting (a frozen dataclass, checked in one line per key); the windows it implies are
planned by `agl.inference.long_audio`, which says what each mode does
(docs/inference.md#long-audio).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from agl.core.checks import RULES
from agl.errors import AglError

MODES = ("native", "multi_part", "windows", "truncate")
SPLITS = ("fixed", "low_energy")
STARTS = ("first", "random")
AGGREGATES = ("vote_medoid",)


@dataclass(frozen=True)
class LongAudio:
    """A model entry's `long_audio:` (every field optional; these are the defaults)."""

    mode: str = "native"
    window_s: float = 30.0  # the longest window sent (a Whisper encoder's 30 s)
    overlap_s: float = 0.0  # seconds each window shares with the one before
    split: str = "fixed"  # fixed | low_energy
    search_s: float = 2.0  # low_energy: how far back from a nominal cut the quietest point is sought
    min_tail_s: float = 10.0  # a last window shorter than this slides back to a full window
    start: str = "first"  # truncate: first | random (seeded by `seed` and the clip's key)
    seed: int = 0
    aggregate: str = "vote_medoid"  # windows: how answers are combined (agl.inference.window_vote)
    # A run whose provider-reported heard seconds fall short of the seconds sent by more than
    # this share is flagged ("the server heard 30 s of 130"): audio tokens are counted in
    # steps (Gemini: 32 per second), so an exact match is not expected.
    heard_tolerance: float = 0.1

    @property
    def windowed(self) -> bool:
        """Whether the driver cuts the clip (every mode but `native`)."""
        return self.mode != "native"

    def protocol(self) -> dict[str, Any]:
        """The fields that decide what reaches the model (the run's fingerprint holds them;
        the tolerance only reads the replies)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "heard_tolerance"}
        if self.mode == "native":
            return {"mode": "native"}
        return d


NATIVE = LongAudio()

_NUMBERS = {"window_s": "positive", "overlap_s": "nonnegative", "search_s": "nonnegative",
            "min_tail_s": "nonnegative", "seed": "seed", "heard_tolerance": "share_closed"}
_CHOICES = {"mode": MODES, "split": SPLITS, "start": STARTS, "aggregate": AGGREGATES}


def parse_long_audio(value: Any, where: str) -> LongAudio:
    """A `long_audio:` mapping (or just a mode, `long_audio: windows`) as a checked
    `LongAudio`; every problem is one line naming `where` and the key."""
    if value is None:
        return NATIVE
    if isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, dict):
        raise AglError(f"{where}: {value!r} is not a mapping; e.g. long_audio: {{mode: windows, window_s: 30}}")
    known = {f.name for f in fields(LongAudio)}
    unknown = sorted(set(map(str, value)) - known)
    if unknown:
        raise AglError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for key, choices in _CHOICES.items():
        if key in value and value[key] not in choices:
            raise AglError(f"{where}.{key}: {value[key]!r} is not one of {', '.join(choices)}")
    for key, rule in _NUMBERS.items():
        if key in value and not RULES[rule].test(value[key]):
            default = getattr(NATIVE, key)
            raise AglError(f"{where}.{key}: {value[key]!r} is not {RULES[rule].what}; "
                           f"e.g. `{key}: {default}`")  # the form of agl.core.checks.refusal
    cfg = LongAudio(**{k: (int(v) if k == "seed" else float(v) if k in _NUMBERS else v)
                       for k, v in value.items()})
    if cfg.overlap_s >= cfg.window_s:
        raise AglError(f"{where}.overlap_s: {cfg.overlap_s:g} must be less than window_s "
                       f"{cfg.window_s:g} (each window must move on)")
    if cfg.split == "low_energy" and cfg.search_s >= cfg.window_s - cfg.overlap_s:
        raise AglError(f"{where}.search_s: {cfg.search_s:g} must be less than window_s - overlap_s "
                       f"({cfg.window_s - cfg.overlap_s:g}): a cut may move back only within its window")
    if cfg.start == "random" and cfg.mode != "truncate":
        raise AglError(f"{where}.start: random picks the one window of mode truncate; "
                       f"mode {cfg.mode} hears every window (set mode: truncate, or start: first)")
    return cfg


def protocol_label(protocol: dict[str, Any] | None) -> str:
    """What a run heard of each clip, in words, from its summary's `long_audio` (absent:
    `native`, the file as its backend takes it: an API the whole clip, knn its first
    `max_seconds`): "first 30 s", "random 30 s (seed 0)", "whole clip, 30-s windows"."""
    if not protocol or protocol.get("mode", "native") == "native":
        return "the file as the backend takes it (native)"
    w = float(protocol.get("window_s", NATIVE.window_s))
    mode = protocol["mode"]
    if mode == "truncate":
        return (f"random {w:g} s (seed {protocol.get('seed', 0)})" if protocol.get("start") == "random"
                else f"first {w:g} s")
    return f"whole clip, {w:g}-s {'parts of one prompt' if mode == 'multi_part' else 'windows'}"
