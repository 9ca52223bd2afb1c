"""What differs between the audio-language families the `transformers` backend runs: data,
keyed by `config.model_type`, never code that branches on model names.

A family absent from the table runs with the defaults: its checkpoint's own model class,
its own processor, and the audio window its feature extractor states (Whisper's `n_samples`).

Processor truncation is set, never left to the processor's default (issue 45: the authors
called `Qwen2_5OmniProcessor` without `audio_kwargs`, and its Whisper extractor kept 30 s of
a 130-s clip). `truncation` holds, for each value of the setting `processor_truncation` the
family can take, the audio keyword arguments that make its processor do it; a value absent
is refused in one line with `why_not`. `truncates` is the family's default: what the model
can take (docs/inference.md#long-audio: the per-family table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agl.errors import AglError


@dataclass(frozen=True)
class Family:
    # Extra from_pretrained and generate arguments.
    load: dict[str, Any] = field(default_factory=dict)
    generate: dict[str, Any] = field(default_factory=dict)
    # The longest audio (seconds from the start) the family's processor keeps of one clip;
    # None: read it from the feature extractor (`n_samples / sampling_rate`) or, failing
    # that, from the processor attribute named by `window_attr`; still None: no limit.
    window_s: float | None = None
    window_attr: str | None = None
    # Generate with this submodule of the loaded model (the omni families' `thinker`: the
    # full model's own generate() wraps the talker and demands a voice even for text).
    generator: str | None = None
    # Extra processor (feature extraction) arguments.
    processor: dict[str, Any] = field(default_factory=dict)
    # Sub-models (by their config's `model_type`) that an audio prompt never runs: they
    # are not built, and their weights in the checkpoint are skipped on load.
    unbuilt: tuple[str, ...] = ()
    # processor_truncation: value -> the processor's `audio_kwargs` that carry it out
    # (LONGEST: the batch's longest wave, in samples); {} for a family not in the table:
    # nothing is passed, and setting processor_truncation is refused (no known switch).
    truncation: dict[bool, dict[str, Any]] = field(default_factory=dict)
    # The default processor_truncation; None: whether the family has a window at all.
    truncates: bool | None = None
    # Why a value missing from `truncation` cannot be set (the one line's reason).
    why_not: str = ""
    # What the family hears of a long clip by default, in words (`agl models`).
    hears: str = "up to its extractor's window, if any"
    # What the checkpoint is, for `agl models` and the README (not used to load it).
    note: str = ""


LONGEST = "longest"  # in `truncation`: the batch's longest wave (in samples), per call

# Whisper's extractor pads to `max_length` and cuts there unless `truncation` is false; with it
# false, max_length must be the batch's longest wave (the omni processors pad to max_length).
_WHISPER_ON = {"truncation": True}
_WHISPER_OFF = {"truncation": False, "max_length": LONGEST}


FAMILIES: dict[str, Family] = {
    # The encoder's 1500 positions are 30 s of mel frames: past them the model refuses.
    "qwen2_audio": Family(truncation={True: _WHISPER_ON}, truncates=True,
                          why_not="its Whisper encoder takes 30 s (3,000 mel frames) and no more",
                          hears="first 30 s (processor truncation on, as the paper)",
                          note="Whisper encoder; 30 s window"),
    # AF3's processor cuts a clip into 30 s Whisper windows, up to `max_audio_len` (600 s);
    # the cap is the processor's own, with no switch (AGL1K's clips end by 180 s).
    "audioflamingo3": Family(window_attr="max_audio_len", truncation={True: {}}, truncates=True,
                             why_not="its processor caps a clip at max_audio_len (600 s) with no switch",
                             hears="whole clip up to 600 s (its processor's 30-s windows)",
                             note="30 s windows up to 10 min"),
    # Text out only: the talker (speech synthesis) and token2wav are neither built nor run,
    # so only the thinker's weights are read from the full checkpoint.
    # Their encoders run a clip in 2-s chunks (n_window): any length; only the processor's
    # Whisper extractor cut at 30 s (Qwen2.5-Omni's processor pads to max_length; Qwen3-Omni's
    # defaults to truncation off already).
    "qwen2_5_omni": Family(
        load={"enable_audio_output": False}, generator="thinker",
        truncation={True: _WHISPER_ON, False: _WHISPER_OFF}, truncates=False,
        hears="whole clip (processor truncation off)",
        note="thinker only; Whisper-style encoder, chunked: whole clip"
    ),
    "qwen3_omni_moe": Family(
        load={"enable_audio_output": False}, generator="thinker",
        truncation={True: _WHISPER_ON, False: {"truncation": False, "padding": True}}, truncates=False,
        hears="whole clip (processor truncation off)",
        note="MoE thinker only; AuT encoder: whole clip"
    ),
    # Gemma-3n's feature extractor keeps 30 s (its `max_length` default, 480,000 samples),
    # and every clip becomes 188 audio tokens whatever its length. Its vision tower is timm's
    # MobileNet-V5 (300M parameters, and timm needs torchvision): images never reach it here.
    "gemma3n": Family(window_s=30.0, unbuilt=("gemma3n_vision",),
                      truncation={True: {"truncation": True, "max_length": 480_000}}, truncates=True,
                      why_not="its processor gives every clip 188 audio tokens (30 s)",
                      hears="first 30 s (processor truncation on, as the paper)",
                      note="USM audio encoder; 30 s; vision tower not loaded"),
    # Phi-4-multimodal's extractor has no length limit: the whole clip is heard.
    "phi4_multimodal": Family(truncation={False: {}}, truncates=False,
                              why_not="its extractor has no length limit to switch on (the whole clip is heard)",
                              hears="whole clip (no limit)",
                              note="Conformer audio encoder; whole clip"),
}


def family(model_type: str) -> Family:
    return FAMILIES.get(model_type, Family())


def window_seconds(fam: Family, processor: Any, feature_extractor: Any) -> float | None:
    """The longest stretch of a clip this family hears, in seconds (None: all of it)."""
    if fam.window_s is not None:
        return fam.window_s
    if fam.window_attr and getattr(processor, fam.window_attr, None):
        return float(getattr(processor, fam.window_attr))
    n = getattr(feature_extractor, "n_samples", None)
    if n:
        return float(n) / float(feature_extractor.sampling_rate)
    return None


def processor_truncation(fam: Family, model_type: str, setting: Any, window: float | None) -> bool:
    """Whether the family's processor keeps only its window in this run: the setting
    `processor_truncation`, else the family's default; a value the family cannot take is one
    line (AglError) naming the family and why."""
    if setting is None:
        return fam.truncates if fam.truncates is not None else window is not None
    value = bool(setting)
    if value not in fam.truncation:
        why = fam.why_not or "no known processor switch for it in agl.backends._families"
        raise AglError(f"transformers backend: processor_truncation: {str(value).lower()} is refused "
                       f"for the {model_type} family: {why}; leave it unset (the family's default: "
                       f"{str(processor_truncation(fam, model_type, None, window)).lower()})"
                       + ("; to hear a long clip use long_audio: {mode: windows}" if not value else ""))
    return value


def truncation_kwargs(fam: Family, truncates: bool, longest: int) -> dict[str, Any]:
    """The processor's `audio_kwargs` that carry out `truncates` for this batch ({}: none)."""
    return {k: (longest if v == LONGEST else v) for k, v in fam.truncation.get(truncates, {}).items()}


def default_hearing(model_type: str | None) -> str:
    """What a family hears of a long clip by default, in words (`agl models`)."""
    return "whole clip" if model_type is None else family(model_type).hears
