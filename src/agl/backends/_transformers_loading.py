"""Loading for the `transformers` backend: a checkpoint into (model, processor, config).

The model class is the checkpoint's own `architectures[0]`, on the device and dtype the
settings ask for; towers a family never runs are not built (`without_submodels`); a processor
that needs torchvision is rebuilt audio-only (`load_processor`). The backend itself, its
queue and batches, is `agl.backends.local_transformers`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModel
from transformers.utils import cached_file

from agl.backends._families import family
from agl.errors import AglError


def device_and_dtype(settings: dict[str, Any]) -> tuple[str, Any]:
    """The settings' `device` and `dtype` ("auto": cuda when available; bfloat16 on GPU,
    else float32) as a device name and a torch dtype."""
    device = str(settings.get("device", "auto"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    name = str(settings.get("dtype", "auto"))
    if name == "auto":
        name = "bfloat16" if device.startswith("cuda") else "float32"
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise AglError(f"transformers backend: unknown dtype '{name}'")
    return device, dtype


def load_checkpoint(path: str, settings: dict[str, Any]) -> tuple[Any, Any, Any, float]:
    """(model, processor, config, seconds the load took) for a checkpoint path or Hub id;
    anything that stops it is one AglError line. The tokenizer pads on the left, so every
    clip of a batch starts its new tokens together."""
    t0 = time.perf_counter()
    local_only = bool(settings.get("local_files_only", True))
    revision = settings.get("revision")  # a Hub branch, tag or commit
    hub = {"local_files_only": local_only, "revision": revision}
    try:
        config = transformers.AutoConfig.from_pretrained(path, **hub)
        arch = (config.architectures or [None])[0]
        cls = getattr(transformers, arch, None) if arch else None
        if cls is None:
            raise AglError(f"transformers backend: {path}: config names no "
                           f"model class this transformers version has ({arch})")
        fam = family(config.model_type)
        device, dtype = device_and_dtype(settings)
        with without_submodels(fam.unbuilt):
            model = cls.from_pretrained(path, dtype=dtype, **hub, **fam.load)
        model.to(device).eval()
        processor = load_processor(path, local_only, revision)
    except AglError:
        raise
    except (OSError, ValueError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise AglError(f"transformers backend: cannot load '{path}' "
                       f"({type(exc).__name__}: {first}); give a local path or "
                       "download the weights into the Hugging Face cache") from None
    if feature_extractor(processor) is None:
        raise AglError(f"transformers backend: {path}: its processor has no "
                       "audio feature extractor; not an audio-language model")
    tok = getattr(processor, "tokenizer", None)
    if tok is not None:
        # Batches are left-padded so that every clip's new tokens start together.
        tok.padding_side = "left"
    return model, processor, config, time.perf_counter() - t0


_BUILD_LOCK = threading.Lock()


@contextmanager
def without_submodels(model_types: Sequence[str]) -> Iterator[None]:
    """Build a model whose sub-models of these config `model_type`s are left out.

    Multimodal classes build every tower through `AutoModel.from_config`, images included,
    even when only audio will be given. Where a family's table names such a tower (Gemma-3n's
    timm vision tower: 300M parameters, and timm needs torchvision), it is replaced while the
    model is built by an empty module that refuses to run; its checkpoint weights then match
    nothing and are skipped on load. Audio prompts never reach it, so replies are unchanged.
    """
    if not model_types:
        yield
        return

    class NotLoaded(torch.nn.Module):
        def __init__(self, model_type: str):
            super().__init__()
            self.model_type = model_type

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"the {self.model_type} sub-model was not loaded: this "
                               "backend gives the model audio and text only")

    own = AutoModel.__dict__.get("from_config")
    build = AutoModel.from_config

    def from_config(cls, config, **kwargs):
        if getattr(config, "model_type", None) in model_types:
            return NotLoaded(config.model_type)
        return build(config, **kwargs)

    with _BUILD_LOCK:  # one patched build at a time; restored even when loading fails
        AutoModel.from_config = classmethod(from_config)
        try:
            yield
        finally:
            if own is None:
                del AutoModel.from_config
            else:
                AutoModel.from_config = own


def feature_extractor(processor: Any) -> Any:
    """The processor's audio part: `feature_extractor` for most, `audio_processor` for Phi-4."""
    return getattr(processor, "feature_extractor", None) or getattr(processor,
                                                                    "audio_processor", None)


def load_processor(path: str, local_only: bool = True, revision: str | None = None) -> Any:
    """`AutoProcessor`, or where that needs torchvision (a video or image processor the
    omni families and Phi-4 carry), the same processor class built from its tokenizer,
    audio feature extractor and chat template alone."""
    hub = {"local_files_only": local_only, "revision": revision}
    try:
        return transformers.AutoProcessor.from_pretrained(path, **hub)
    except (ImportError, ValueError) as exc:  # v5 says either, naming torchvision
        if "torchvision" not in str(exc).lower():
            raise
        return _audio_only_processor(path, hub)


def _audio_only_processor(path: str, hub: dict[str, Any]) -> Any:
    def read_json(name: str) -> dict[str, Any]:
        f = cached_file(path, name, **hub, _raise_exceptions_for_missing_entries=False)
        return json.loads(Path(f).read_text(encoding="utf-8")) if f else {}

    proc_cfg = read_json("processor_config.json")
    name = proc_cfg.get("processor_class") or read_json("preprocessor_config.json").get(
        "processor_class")
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        raise ImportError(f"{path}: its processor needs torchvision and names no processor "
                          "class to build an audio-only one from")
    parts: dict[str, Any] = {}
    for attr in cls.get_attributes():
        if attr == "tokenizer":
            parts[attr] = transformers.AutoTokenizer.from_pretrained(path, **hub)
        elif attr in ("feature_extractor", "audio_processor"):
            parts[attr] = transformers.AutoFeatureExtractor.from_pretrained(path, **hub)
        else:
            parts[attr] = None  # the image / video slot: unused by audio prompts
    template_file = cached_file(path, "chat_template.jinja", **hub,
                                _raise_exceptions_for_missing_entries=False)
    template = (Path(template_file).read_text(encoding="utf-8") if template_file
                else read_json("chat_template.json").get("chat_template")
                or proc_cfg.get("chat_template")
                or getattr(parts.get("tokenizer"), "chat_template", None))
    extra = {k: v for k, v in proc_cfg.items()
             if k not in parts and k not in ("processor_class", "chat_template")
             and not isinstance(v, dict)}

    class AudioOnly(cls):  # type: ignore[misc, valid-type]
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    AudioOnly.__name__ = AudioOnly.__qualname__ = cls.__name__
    try:
        return AudioOnly(**parts, chat_template=template, **extra)
    except TypeError:
        return AudioOnly(**parts, chat_template=template)
