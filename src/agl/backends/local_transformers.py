"""`transformers`: local audio-language models through Hugging Face transformers.

One generic path serves every family transformers supports natively with a processor that
takes `text` + `audio` (Qwen2-Audio, Audio Flamingo 3, Qwen2.5-Omni, ...): the model class
is the checkpoint's own `architectures[0]`, the processor is `AutoProcessor`, the prompt is
the processor's chat template with one audio entry, and the audio is decoded with
soundfile and resampled (scipy polyphase) to the feature extractor's `sampling_rate`.
What differs between families is data in `_FAMILY` below, keyed by `config.model_type`,
never code branching on model names.

Settings:
  device        cpu | cuda | cuda:N | auto (default: cuda when available)
  dtype         float32 | bfloat16 | float16 | auto (default: bfloat16 on GPU, else float32)
  max_new_tokens (512), do_sample (false: greedy, so replies are cached), temperature, top_p
  max_seconds   only the first N seconds of each clip (default: the whole clip; the
                processor may cut further, e.g. Qwen2-Audio's 30 s window)
  local_files_only (default true: weights come from a path or the local HF cache)

Every reply carries load_s (the one-time model load), prefill_s (audio encoder + prompt,
up to the first new token), decode_s and tokens_per_s (the rest), the efficiency figures
long-audio benchmarks report. One generation runs at a time (a model is one device's
worth of memory); the runner's concurrency only overlaps audio decoding with it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agl.backends.base import Backend, Reply, ReplyStatus, Request, register
from agl.errors import AglError

# Per family (config.model_type): extra from_pretrained and generate arguments.
_FAMILY: dict[str, dict[str, dict[str, Any]]] = {
    # Text out only: the talker (speech synthesis) is neither loaded nor run.
    "qwen2_5_omni": {"load": {"enable_audio_output": False}, "generate": {"return_audio": False}},
}


@register("transformers")
class LocalTransformers(Backend):
    def __init__(self, model: str, **settings: Any):
        super().__init__(model, **settings)
        self.deterministic = not bool(settings.get("do_sample", False))
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any, Any] | None = None  # model, processor, config
        self.load_s: float | None = None

    # --- loading --------------------------------------------------------------------------

    def prepare(self, clips: Sequence[Any], audio_root: Path | None) -> None:
        self._load()  # fail before the first request, as one clear line

    def _device_dtype(self):
        import torch

        device = str(self.settings.get("device", "auto"))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        name = str(self.settings.get("dtype", "auto"))
        if name == "auto":
            name = "bfloat16" if device.startswith("cuda") else "float32"
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise AglError(f"transformers backend: unknown dtype '{name}'")
        return device, dtype

    def _load(self):
        with self._lock:
            if self._loaded is not None:
                return self._loaded
            import transformers

            t0 = time.perf_counter()
            local_only = bool(self.settings.get("local_files_only", True))
            try:
                config = transformers.AutoConfig.from_pretrained(
                    self.model, local_files_only=local_only)
                arch = (config.architectures or [None])[0]
                cls = getattr(transformers, arch, None) if arch else None
                if cls is None:
                    raise AglError(f"transformers backend: {self.model}: config names no "
                                   f"model class this transformers version has ({arch})")
                family = _FAMILY.get(config.model_type, {})
                device, dtype = self._device_dtype()
                model = cls.from_pretrained(self.model, dtype=dtype,
                                            local_files_only=local_only,
                                            **family.get("load", {}))
                model.to(device).eval()
                processor = transformers.AutoProcessor.from_pretrained(
                    self.model, local_files_only=local_only)
            except AglError:
                raise
            except (OSError, ValueError, ImportError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise AglError(f"transformers backend: cannot load '{self.model}' "
                               f"({type(exc).__name__}: {first}); give a local path or "
                               "download the weights into the Hugging Face cache") from None
            if getattr(processor, "feature_extractor", None) is None:
                raise AglError(f"transformers backend: {self.model}: its processor has no "
                               "audio feature extractor; not an audio-language model")
            self.load_s = time.perf_counter() - t0
            self._loaded = (model, processor, config)
            return self._loaded

    # --- generation -----------------------------------------------------------------------

    async def generate(self, request: Request) -> Reply:
        model, processor, config = await asyncio.to_thread(self._load)
        sr = int(processor.feature_extractor.sampling_rate)
        wave = None
        if request.audio_path is not None:
            from agl.backends._audio import load_mono

            max_s = self.settings.get("max_seconds")
            try:
                wave = await asyncio.to_thread(load_mono, request.audio_path, sr,
                                               float(max_s) if max_s else None)
            except Exception as exc:  # noqa: BLE001 - a clip that cannot be decoded
                return Reply(ReplyStatus.FAILED,
                             error=f"cannot decode {Path(request.audio_path).name}: {exc}")
        return await asyncio.to_thread(self._generate_locked, model, processor, config,
                                       request, wave)

    def _messages(self, request: Request) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if request.audio_path is not None:
            # Both template styles: `content.type == 'audio'` and `'audio' in content`.
            content.append({"type": "audio", "audio": str(request.audio_path)})
        content.append({"type": "text", "text": request.prompt})
        messages = []
        if request.system:
            messages.append({"role": "system", "content": [{"type": "text",
                                                            "text": request.system}]})
        messages.append({"role": "user", "content": content})
        return messages

    def _generate_locked(self, model, processor, config, request: Request, wave) -> Reply:
        import torch

        with self._lock:
            text = processor.apply_chat_template(self._messages(request),
                                                 add_generation_prompt=True, tokenize=False)
            kwargs: dict[str, Any] = {"text": text, "return_tensors": "pt"}
            if wave is not None:
                kwargs["audio"] = [wave]
                kwargs["sampling_rate"] = int(processor.feature_extractor.sampling_rate)
            inputs = processor(**kwargs)
            device = next(model.parameters()).device
            dtype = next(model.parameters()).dtype
            inputs = {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device))
                      if hasattr(v, "to") else v for k, v in inputs.items()}
            n_in = int(inputs["input_ids"].shape[1])
            clock = _FirstTokenClock(device)
            gen = {"max_new_tokens": int(self.settings.get("max_new_tokens", 512)),
                   "do_sample": bool(self.settings.get("do_sample", False)),
                   "logits_processor": [clock]}
            for k in ("temperature", "top_p", "top_k"):
                if gen["do_sample"] and self.settings.get(k) is not None:
                    gen[k] = self.settings[k]
            if not gen["do_sample"]:
                # Greedy: clear sampling knobs a checkpoint's generation_config may carry.
                gen.update(temperature=None, top_p=None, top_k=None)
            tok = getattr(processor, "tokenizer", processor)
            if getattr(tok, "pad_token_id", None) is not None:
                gen["pad_token_id"] = tok.pad_token_id
            gen.update(_FAMILY.get(config.model_type, {}).get("generate", {}))
            clock.start()
            with torch.inference_mode():
                out = model.generate(**inputs, **gen)
            end = clock.now()
        seq = out if isinstance(out, torch.Tensor) else out.sequences
        new = seq[0, n_in:]
        eos = _eos_ids(model, tok)
        n_out = int(new.numel())
        for i, t in enumerate(new.tolist()):
            if t in eos:
                n_out = i + 1
                break
        reply_text = tok.decode(new[:n_out], skip_special_tokens=True)
        prefill = (clock.first or end) - clock.t0
        decode = end - (clock.first or end)
        extra = {"load_s": self.load_s, "prefill_s": prefill, "decode_s": decode,
                 "tokens_per_s": (n_out - 1) / decode if n_out > 1 and decode > 0 else None,
                 "device": str(device), "dtype": str(dtype).replace("torch.", "")}
        return Reply(ReplyStatus.OK, text=reply_text, input_tokens=n_in, output_tokens=n_out,
                     latency_s=end - clock.t0, extra=extra)

    async def aclose(self) -> None:
        self._loaded = None


class _FirstTokenClock:
    """A logits processor that changes nothing and notes when the first new token's logits
    exist: that instant splits prefill (audio encoder + prompt) from decoding."""

    def __init__(self, device: Any):
        self.cuda = str(device).startswith("cuda")
        self.t0 = 0.0
        self.first: float | None = None

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self) -> None:
        self.t0, self.first = self.now(), None

    def __call__(self, input_ids, scores):
        if self.first is None:
            self.first = self.now()
        return scores


def _eos_ids(model: Any, tok: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), tok):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return ids
