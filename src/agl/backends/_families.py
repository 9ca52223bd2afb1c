"""What differs between the audio-language families the `transformers` backend runs: data,
keyed by `config.model_type`, never code that branches on model names.

A family absent from the table runs with the defaults: its checkpoint's own model class,
its own processor, and the audio window its feature extractor states (Whisper's `n_samples`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    # What the checkpoint is, for `agl models` and the README (not used to load it).
    note: str = ""


FAMILIES: dict[str, Family] = {
    "qwen2_audio": Family(note="Whisper encoder; 30 s window"),
    # AF3's processor cuts a clip into 30 s Whisper windows, up to `max_audio_len` (600 s).
    "audioflamingo3": Family(window_attr="max_audio_len", note="30 s windows up to 10 min"),
    # Text out only: the talker (speech synthesis) and token2wav are neither built nor run,
    # so only the thinker's weights are read from the full checkpoint.
    "qwen2_5_omni": Family(
        load={"enable_audio_output": False}, generator="thinker", note="thinker only; Whisper-style encoder"
    ),
    "qwen3_omni_moe": Family(
        load={"enable_audio_output": False}, generator="thinker", note="MoE thinker only; AuT encoder"
    ),
    # Gemma-3n's feature extractor keeps 30 s (its `max_length` default, 480,000 samples),
    # and every clip becomes 188 audio tokens whatever its length. Its vision tower is timm's
    # MobileNet-V5 (300M parameters, and timm needs torchvision): images never reach it here.
    "gemma3n": Family(window_s=30.0, unbuilt=("gemma3n_vision",),
                      note="USM audio encoder; 30 s; vision tower not loaded"),
    # Phi-4-multimodal's extractor has no length limit: the whole clip is heard.
    "phi4_multimodal": Family(note="Conformer audio encoder; whole clip"),
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
