"""`transformers`: local audio-language models through Hugging Face transformers.

One generic path serves every family transformers supports natively with a processor that
takes `text` + `audio` (Qwen2-Audio, Audio Flamingo 3, Qwen2.5-Omni, Qwen3-Omni, Gemma-3n,
Phi-4-multimodal): the model class is the checkpoint's own `architectures[0]`, the processor
is `AutoProcessor`, the prompt is the processor's chat template with one audio entry, and the
audio is decoded with soundfile and resampled (scipy polyphase) to the feature extractor's
`sampling_rate`. What differs between families is data (`agl.backends._families`), keyed by
`config.model_type`, never code branching on model names.

Audio-only processors: the omni families' and Phi-4's processors also hold a video or image
processor that needs torchvision. When `AutoProcessor` fails for that reason, the processor
class named in the checkpoint is built from its tokenizer, audio feature extractor and chat
template alone (its image/video slots empty); audio prompts never touch those slots.
Likewise a vision tower a family's table lists under `unbuilt` (Gemma-3n's timm MobileNet)
is not built at all (`without_submodels`); its weights are skipped on load. Loading lives in
`agl.backends._transformers_loading`; this file is the backend: its queue and batches.

Settings:
  device        cpu | cuda | cuda:N | auto (default: cuda when available)
  dtype         float32 | bfloat16 | float16 | auto (default: bfloat16 on GPU, else float32)
  max_new_tokens (512), do_sample (false: greedy, so replies are cached), temperature, top_p
  seed          with do_sample: each clip is generated alone, torch seeded by (seed, clip id),
                so a clip's draw is repeatable whatever its batch or order (greedy ignores it)
  system_prompt the system turn of every request (agl.inference.model_run)
  max_seconds   only the first N seconds of each clip (default: the whole clip, up to the
                family's window where its processor truncates, e.g. Qwen2-Audio's 30 s)
  processor_truncation  true | false: whether the family's processor keeps only its window.
                Set explicitly on every call (the processor's audio_kwargs, e.g. Whisper's
                `truncation=False` with max_length the batch's longest wave); default the
                family's own (agl.backends._families: off for Qwen2.5/3-Omni, whose chunked
                encoders take any length; on for Qwen2-Audio and Gemma-3n, whose encoders
                take 30 s). A value the family cannot take is refused in one line.
  batch_size    clips per generate call (default 1). Clips are left-padded, each with its
                own attention mask and audio length; greedy output is the same as one at a
                time. Set the run's `concurrency` to at least `batch_size` (2x lets audio
                decoding overlap generation) so that batches fill.
  batch_wait_s  how long a partial batch waits for more clips (default 0.5 s)
  local_files_only (default true: weights come from a path or the local HF cache)
  revision      a Hub branch, tag or commit (e.g. a checkpoint's transformers-format PR)

What each clip was heard as is recorded in its prediction's meta, deterministically:
`audio_s` (the clip's length), `heard_s` (seconds from the start given to the model),
`window_s` (the family's limit, or null), `truncated`, `processor_truncation` (whether the
family's processor kept only `window_s`: set on the processor, and the backend cuts there
itself, so the record says exactly what was heard) and `transformers_version`. A clip
longer than the window is heard whole with `long_audio: {mode: windows}`
(docs/inference.md#long-audio): each window is a clip of its own here. Efficiency figures
(load_s, prefill_s, decode_s, tokens_per_s) are measured per generate call and shared by the clips
of one batch; `efficiency_log: <path>` appends one JSON line per batch (those figures plus
the batch size, output tokens and peak memory: CUDA's peak allocation, or the process's
peak RSS on CPU) to a file that must stay outside DVC outputs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
import transformers

from agl.backends._families import (
    FAMILIES,
    default_hearing,
    family,
    processor_truncation,
    truncation_kwargs,
    window_seconds,
)
from agl.backends._transformers_loading import feature_extractor, load_checkpoint
from agl.backends.base import Backend
from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.core import diskwrite
from agl.core.audio import clip_seconds, load_mono
from agl.errors import AglError


def known_families() -> tuple[str, ...]:
    """The model_types the family table describes (a roster entry's `family` is one)."""
    return tuple(sorted(FAMILIES))


def hears_by_default(model_type: str | None) -> str:
    """What a family hears of a long clip by default, in words (`agl models`)."""
    return default_hearing(model_type)


def _version() -> str:
    return str(transformers.__version__)


class LocalTransformers(Backend):
    """A local audio-language model (see the module docstring for its settings)."""

    name = "transformers"  # its entry in the index (agl.backends)

    loads_model = True  # on a Ray cluster: one actor per model copy (agl.inference.executors)
    multi_part = True  # several windows of a clip as audio parts of one prompt (long_audio)
    example_model = "Qwen/Qwen2-Audio-7B-Instruct"
    settings_rules: ClassVar[dict[str, str | None]] = {
        "device": None, "dtype": None, "max_new_tokens": "count", "do_sample": "bool",
        "temperature": "nonnegative", "top_p": "share_closed", "top_k": "count", "seed": "seed",
        "system_prompt": None, "max_seconds": "positive", "batch_size": "count",
        "batch_wait_s": "nonnegative", "local_files_only": "bool", "revision": None,
        "efficiency_log": None, "processor_truncation": "bool"}

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        self.require_model()
        self.deterministic = not bool(settings.get("do_sample", False))
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any, Any] | None = None  # model, processor, config
        self.truncates: bool | None = None  # processor_truncation as set (known once loaded)
        self.load_s: float | None = None
        try:
            self.batch_size = int(settings.get("batch_size", 1))
            self.batch_wait_s = float(settings.get("batch_wait_s", 0.5))
        except (TypeError, ValueError):
            raise AglError("transformers backend: batch_size must be an integer and "
                           "batch_wait_s a number of seconds") from None
        if self.batch_size < 1 or self.batch_wait_s < 0:
            raise AglError(f"transformers backend: batch_size must be >= 1 and batch_wait_s "
                           f">= 0 (got {self.batch_size}, {self.batch_wait_s})")
        self._queue: list[tuple[Request, Any, dict[str, Any], asyncio.Future]] = []
        self._full: asyncio.Event | None = None
        self._worker: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- loading --------------------------------------------------------------------------

    def prepare(self, clips: Sequence[Any], audio_root: Path | None) -> None:
        self._load()  # fail before the first request, as one clear line

    def _load(self):
        with self._lock:
            if self._loaded is None:
                model, processor, config, self.load_s = load_checkpoint(self.model, self.settings)
                fam = family(config.model_type)
                window = window_seconds(fam, processor, feature_extractor(processor))
                self.truncates = processor_truncation(fam, config.model_type,
                                                      self.settings.get("processor_truncation"), window)
                self._loaded = (model, processor, config)
            return self._loaded

    # --- requests in, batches out -----------------------------------------------------------

    async def generate(self, request: Request) -> Reply:
        model, processor, config = await asyncio.to_thread(self._load)
        wave, heard = None, {}
        if request.audio_path is not None:
            try:
                wave, heard = await asyncio.to_thread(self._audio, request, processor, config)
            except Exception as exc:  # noqa: BLE001 - a clip that cannot be decoded
                return Reply(ReplyStatus.FAILED,
                             error=f"cannot decode {Path(request.audio_path).name}: {exc}")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        if self._full is None or self._loop is not loop:
            # A new event loop (another asyncio.run): the old queue and worker are gone.
            self._loop, self._full, self._worker, self._queue = loop, asyncio.Event(), None, []
        self._queue.append((request, wave, heard, fut))
        if len(self._queue) >= self.batch_size:
            self._full.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._drain(model, processor, config))
        return await fut  # cancelled by the runner's timeout: the batch skips it

    async def _drain(self, model, processor, config) -> None:
        """One worker per backend: takes up to `batch_size` queued clips at a time."""
        try:
            await self._drain_queue(model, processor, config)
        except BaseException as exc:  # cancelled or a bug: no request may wait forever
            for *_, fut in self._queue:
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception)
                                      else RuntimeError("batch worker stopped"))
            self._queue.clear()
            raise

    async def _drain_queue(self, model, processor, config) -> None:
        assert self._full is not None
        while self._queue:
            if len(self._queue) < self.batch_size:
                # Let clips that the runner already admitted finish decoding and join.
                try:
                    async with asyncio.timeout(self.batch_wait_s):
                        await self._full.wait()
                except TimeoutError:
                    pass
            batch = self._queue[: self.batch_size]
            del self._queue[: self.batch_size]
            if len(self._queue) < self.batch_size:
                self._full.clear()
            live = [item for item in batch if not item[3].done()]  # timed out: skipped
            if not live:
                continue
            # A seeded draw is the clip's own: one clip per generate, seeded by (seed, clip),
            # so its text does not depend on which clips shared its batch or in what order.
            for group in ([[item] for item in live] if self._seeded_sampling() else [live]):
                try:
                    replies = await asyncio.to_thread(self._generate_batch, model, processor,
                                                      config, group)
                except Exception as exc:  # noqa: BLE001 - recorded per clip, never raised
                    replies = [Reply(ReplyStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
                               for _ in group]
                for (_, _, _, fut), reply in zip(group, replies, strict=True):
                    if not fut.done():
                        fut.set_result(reply)

    def _seeded_sampling(self) -> bool:
        return bool(self.settings.get("do_sample", False)) and self.settings.get("seed") is not None

    def _audio(self, request: Request, processor: Any, config: Any) -> tuple[Any, dict[str, Any]]:
        """The samples the model hears (one wave, or one per part of a `multi_part` request,
        each cut to the family's window where its processor truncates) and what was heard,
        rounded to the millisecond (these go into DVC-tracked predictions).
        `processor_truncation`: the value set on the processor (`_inputs` passes it; the
        backend also cuts there itself, so the record is exact), with the transformers version
        whose processors that describes."""
        fe = feature_extractor(processor)
        sr = int(fe.sampling_rate)
        window = window_seconds(family(config.model_type), processor, fe)
        max_s = self.settings.get("max_seconds")
        limits = [float(v) for v in (max_s, window if self.truncates else None) if v]
        keep = min(limits) if limits else None
        total = clip_seconds(request.audio_path)
        facts = {"audio_s": round(total, 3), "window_s": window, "processor_truncation": bool(self.truncates),
                 "transformers_version": _version()}
        if request.parts:  # several windows of the file as audio parts of one prompt
            whole = load_mono(request.audio_path, sr, max(e for _, e in request.parts))
            waves = [whole[int(round(s * sr)):int(round(e * sr))] for s, e in request.parts]
            waves = [w[: int(round(keep * sr))] if keep is not None else w for w in waves]
            kept = [round(len(w) / sr, 3) for w in waves]
            cut = any(k < round(e - s, 3) - 1e-3 for k, (s, e) in zip(kept, request.parts, strict=True))
            return waves, {**facts, "heard_s": round(sum(kept), 3), "parts_heard_s": kept, "truncated": cut}
        wave = load_mono(request.audio_path, sr, keep)
        if keep is not None:
            wave = wave[: int(round(keep * sr))]
        heard_s = len(wave) / sr
        return wave, {**facts, "heard_s": round(heard_s, 3), "truncated": total - heard_s > 1e-3}

    def _messages(self, request: Request) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if request.audio_path is not None:
            # Both template styles: `content.type == 'audio'` and `'audio' in content`; one
            # entry per part of a multi_part request. The samples go to the processor apart (no
            # container tags); the entry holds an opaque word, never the path, which a template
            # could render into the prompt.
            for _ in range(max(1, len(request.parts))):
                content.append({"type": "audio", "audio": "clip"})
        content.append({"type": "text", "text": request.prompt})
        messages = []
        if request.system:
            messages.append({"role": "system", "content": [{"type": "text",
                                                            "text": request.system}]})
        messages.append({"role": "user", "content": content})
        return messages

    def _generate_batch(self, model, processor, config, items) -> list[Reply]:
        fam = family(config.model_type)
        with self._lock:
            inputs, device, dtype = self._inputs(model, processor, fam, items)
            n_in = int(inputs["input_ids"].shape[1])
            clock = _FirstTokenClock(device)
            tok = getattr(processor, "tokenizer", processor)
            generator = getattr(model, fam.generator) if fam.generator else model
            # Stop at any end token the checkpoint or its tokenizer names: a submodule
            # (the omni thinker) may carry a bare generation config of its own.
            eos = _eos_ids(model, tok) | _eos_ids(generator, tok)
            gen = self._generation_kwargs(fam, clock, tok, eos)
            if clock.cuda:
                torch.cuda.reset_peak_memory_stats(device)
            if gen["do_sample"] and self.settings.get("seed") is not None:
                # The authors seed torch once per run (openllm.py L1387), so a clip's draw
                # there depends on every clip before it; here each clip (alone in its
                # generate, see _drain_queue) restarts from (seed, its id): a rerun, a
                # resumed run or another order repeats it.
                request = items[0][0]
                torch.manual_seed(clip_seed(int(self.settings["seed"]), request.sample_id
                                            + (f"#{request.repeat}" if request.repeat else "")))
            clock.start()
            with torch.inference_mode():
                out = generator.generate(**inputs, **gen)
            end = clock.now()
            peak = _peak_memory_mb(device)
        seq = out if isinstance(out, torch.Tensor) else out.sequences
        texts_out, n_outs, ended = _decode(seq, n_in, eos, tok)
        prefill = (clock.first or end) - clock.t0
        decode = end - (clock.first or end)
        steps = max(n_outs) - 1
        figures = {"load_s": self.load_s, "prefill_s": prefill, "decode_s": decode,
                   "tokens_per_s": sum(n - 1 for n in n_outs) / decode
                   if steps > 0 and decode > 0 else None,
                   "device": str(device), "dtype": str(dtype).replace("torch.", "")}
        # Batch composition depends on arrival order and peak memory on the machine: they
        # go to the efficiency log only, never into a prediction.
        self._log_efficiency({**figures, "batch": len(items), "peak_mem_mb": peak}, n_outs)
        mask = inputs.get("attention_mask")
        replies = []
        for row, ((_, _, heard, _), text, n_out, done) in enumerate(zip(items, texts_out, n_outs,
                                                                       ended, strict=True)):
            n_prompt = int(mask[row].sum()) if mask is not None else n_in
            # No end token within max_new_tokens: generate stopped at the output limit, as an
            # API's finish_reason 'length' says (status truncated, never parsed as an answer).
            cut = not done and n_out >= int(gen["max_new_tokens"])
            replies.append(Reply(ReplyStatus.TRUNCATED if cut else ReplyStatus.OK, text=text,
                                 input_tokens=n_prompt, output_tokens=n_out,
                                 latency_s=end - clock.t0,
                                 extra={**figures, **heard,
                                        "finish_reason": "length" if cut else "stop"}))
        return replies

    def _inputs(self, model, processor, fam, items) -> tuple[dict[str, Any], Any, Any]:
        """The batch's model inputs on the model's device, with that device and dtype."""
        fe = feature_extractor(processor)
        texts = [processor.apply_chat_template(self._messages(req),
                                               add_generation_prompt=True, tokenize=False)
                 for req, _, _, _ in items]
        # Pad the texts (left); the audio is padded as each family's extractor does.
        kwargs: dict[str, Any] = {"text": texts, "return_tensors": "pt",
                                  "text_kwargs": {"padding": True}, **fam.processor}
        waves = [x for _, w, _, _ in items if w is not None for x in (w if isinstance(w, list) else [w])]
        if waves:
            kwargs["audio"] = waves
            kwargs["sampling_rate"] = int(fe.sampling_rate)
            # Processor truncation, set on every call (never the processor's default).
            audio_kwargs = {**kwargs.get("audio_kwargs", {}),
                            **truncation_kwargs(fam, bool(self.truncates), max(len(w) for w in waves))}
            if audio_kwargs:
                kwargs["audio_kwargs"] = audio_kwargs
        inputs = processor(**kwargs)
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        # Audio features follow the model's dtype (bfloat16 on GPU); ids and masks stay.
        inputs = {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device))
                  if hasattr(v, "to") else v for k, v in inputs.items()}
        return inputs, device, dtype

    def _generation_kwargs(self, fam, clock, tok, eos: set[int]) -> dict[str, Any]:
        """`generate`'s settings: greedy unless `do_sample`, the first-token clock, end tokens."""
        gen = {"max_new_tokens": int(self.settings.get("max_new_tokens", 512)),
               "do_sample": bool(self.settings.get("do_sample", False)),
               "logits_processor": [clock]}
        for k in ("temperature", "top_p", "top_k"):
            if gen["do_sample"] and self.settings.get(k) is not None:
                gen[k] = self.settings[k]
        if not gen["do_sample"]:
            # Greedy: clear sampling knobs a checkpoint's generation_config may carry.
            gen.update(temperature=None, top_p=None, top_k=None)
        if getattr(tok, "pad_token_id", None) is not None:
            gen["pad_token_id"] = tok.pad_token_id
        gen.update(fam.generate)
        if eos:
            gen["eos_token_id"] = sorted(eos)
        return gen

    def _log_efficiency(self, figures: dict[str, Any], n_outs: list[int]) -> None:
        path = self.settings.get("efficiency_log")
        if not path:
            return
        diskwrite.append_text(path, json.dumps({"model": self.model, **figures,
                                                "output_tokens": n_outs}) + "\n")

    async def aclose(self) -> None:
        self._loaded = None


def _peak_memory_mb(device: Any) -> float:
    """Peak memory of this generate call on CUDA; on CPU, the process's peak RSS so far."""
    if str(device).startswith("cuda"):
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class _FirstTokenClock:
    """A logits processor that changes nothing and notes when the first new token's logits
    exist: that instant splits prefill (audio encoder + prompt) from decoding."""

    def __init__(self, device: Any):
        self.cuda = str(device).startswith("cuda")
        self.t0 = 0.0
        self.first: float | None = None

    def now(self) -> float:
        if self.cuda:
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


def _decode(seq, n_in: int, eos: set[int], tok) -> tuple[list[str], list[int], list[bool]]:
    """Each row's new tokens up to (and counting) its first end token, decoded, and whether
    the row reached an end token at all."""
    texts_out, n_outs, ended = [], [], []
    for row in range(seq.shape[0]):
        new = seq[row, n_in:]
        n_out, done = int(new.numel()), False
        for i, t in enumerate(new.tolist()):
            if t in eos:
                n_out, done = i + 1, True
                break
        n_outs.append(n_out)
        ended.append(done)
        texts_out.append(tok.decode(new[:n_out], skip_special_tokens=True))
    return texts_out, n_outs, ended


def clip_seed(seed: int, sample_id: str) -> int:
    """torch's seed for one clip's draw: the run's seed and the clip's id, hashed (stable
    across processes, unlike hash())."""
    digest = hashlib.sha256(f"{seed}\0{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF
