"""AudioSet tagging of every clip, rolled up to AGL1K's 8 category columns, plus speech.

Taggers (params.yaml `tag.tagger`):

* `transformers`: any Hugging Face AudioSet audio-classification checkpoint; the default,
  used for real runs, is the Audio Spectrogram Transformer 'MIT/ast-finetuned-audioset-10-10-
  0.4593' (downloaded once into the Hugging Face cache). A clip is decoded to mono, resampled
  with scipy's polyphase filter (`agl.core.audio`) to the feature extractor's rate, and cut into windows of
  `window_s` every `hop_s` (default: the checkpoint's own input length, 10.24 s for AST, without
  overlap); the last window is aligned to the clip's end so no audio is left out, and a clip
  shorter than one window is one (padded) window. Class probabilities are the sigmoid of the
  logits (AudioSet is multi-label), pooled over windows by `max` (default: a sound heard once
  is in the clip) or `mean`. Labels are mapped to ontology ids by id or by class name; the
  527 class scores are rolled up to the 8 columns by `agl.curation.ontology.rollup` (max over the
  column's classes; multi-root classes count in each root).
* `precomputed`: the manifest's own category columns (how AGL1K's published tags are
  reproduced, and the offline demo default: no weights to download).

Speech (`tag.speech: vad`): silero-vad (weights ship in its wheel) on the 16 kHz mono signal;
speech seconds and the speech fraction of the clip. `none` skips it (columns left empty).

AGL1K's published columns hold 0/1; a `transformers` run writes the rolled-up probability in
[0, 1] instead (threshold it where a yes/no is wanted; the paper's analysis code calls a clip
speech-bearing at `human_sounds >= 0.1`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from agl.core.audio import decode_mono, resample
from agl.core.checks import check_field_types, check_params
from agl.core.vad import RATE as VAD_RATE
from agl.core.vad import speech_timestamps
from agl.curation.ontology import (
    column_membership,
    fetch_ontology,
    load_ontology,
    multi_root_classes,
    rollup,
    tagger_classes,
)
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError, reject_unknown_keys
from agl.executor import ClipTask, map_clips
from agl.executor.config import ExecutorConfig

DEFAULT_CHECKPOINT = "MIT/ast-finetuned-audioset-10-10-0.4593"
TAGGERS = ("precomputed", "transformers")


@dataclass(frozen=True)
class TagConfig:
    """params.yaml `tag:` (see the module docstring for each choice)."""

    tagger: str = "precomputed"
    checkpoint: str = DEFAULT_CHECKPOINT
    window_s: float | None = None  # None: the checkpoint's input length
    hop_s: float | None = None  # None: = window_s (no overlap)
    pooling: str = "max"
    batch_size: int = 8
    device: str = "cpu"
    ontology: str | None = None  # a local ontology.json; None: fetch the pinned URL into cache
    ontology_cache: str = "cache/audioset"
    speech: str = "vad"
    vad_threshold: float = 0.5
    only_passed: bool = True  # tag only the clips that passed the filter
    # Processes hearing clips at once on this host (agl.executor; the same rows for any value).
    # 1: on the demo a second process costs more CPU (its imports) than it saves.
    jobs: int = 1

    @classmethod
    def from_params(cls, params: dict[str, Any] | None, source: str = "params.yaml tag") -> TagConfig:
        """Build from a params section; an unknown key or a bad choice names the key."""
        params = dict(params or {})
        reject_unknown_keys(params, {f.name for f in fields(cls)}, source)
        check_params("tag", params, source.split()[0])  # the one table (agl.core.checks.PARAMS)
        cfg = cls(**params)
        check_field_types(cfg, source)  # 'four' is one line naming the key, not a traceback
        if cfg.tagger not in TAGGERS:
            raise AglError(f"{source}.tagger: '{cfg.tagger}' is not one of {', '.join(TAGGERS)}")
        if cfg.pooling not in ("max", "mean"):
            raise AglError(f"{source}.pooling: '{cfg.pooling}' is not max or mean")
        if cfg.speech not in ("vad", "none"):
            raise AglError(f"{source}.speech: '{cfg.speech}' is not vad or none")
        return cfg


def window_bounds(n: int, window: int, hop: int) -> list[tuple[int, int]]:
    """Sample ranges covering [0, n): every `hop`, the last one aligned to the end."""
    if n <= window:
        return [(0, n)]
    bounds = [(s, s + window) for s in range(0, n - window + 1, hop)]
    if bounds[-1][1] < n:
        bounds.append((n - window, n))
    return bounds


def checkpoint_plan(cfg: TagConfig) -> tuple[Any, Any]:
    """(the checkpoint's config, its feature extractor): what the run's class ids, sample rate
    and windows come from, read without its weights (the workers load those)."""
    from transformers import AutoConfig, AutoFeatureExtractor

    try:
        return AutoConfig.from_pretrained(cfg.checkpoint), AutoFeatureExtractor.from_pretrained(cfg.checkpoint)
    except OSError as exc:
        raise AglError(f"cannot load tagger checkpoint '{cfg.checkpoint}' ({exc}); "
                       "check tag.checkpoint or the Hugging Face cache") from None


def tagger_windows(cfg: TagConfig, extractor: Any) -> tuple[float, float]:
    """(window_s, hop_s): the settings, or the checkpoint's own input length without overlap."""
    frames = getattr(extractor, "max_length", None)
    default_window = frames / 100.0 if frames else 10.0  # AST: 10 ms per frame
    window_s = float(cfg.window_s or default_window)
    return window_s, float(cfg.hop_s or window_s)


class TransformersTagger:
    """An AudioSet audio-classification checkpoint, windowed and pooled over a clip."""

    def __init__(self, cfg: TagConfig):
        from transformers import AutoFeatureExtractor, AutoModelForAudioClassification

        try:
            self.extractor = AutoFeatureExtractor.from_pretrained(cfg.checkpoint)
            self.model = AutoModelForAudioClassification.from_pretrained(cfg.checkpoint)
        except OSError as exc:
            raise AglError(f"cannot load tagger checkpoint '{cfg.checkpoint}' ({exc}); "
                           "check tag.checkpoint or the Hugging Face cache") from None
        self.model.eval().to(cfg.device)
        self.cfg = cfg
        self.rate = int(self.extractor.sampling_rate)
        self.window_s, self.hop_s = tagger_windows(cfg, self.extractor)

    def scores(self, mono):
        """Pooled class probabilities (numpy, one per class) of a mono clip at `self.rate`."""
        import numpy as np
        import torch

        win, hop = round(self.window_s * self.rate), round(self.hop_s * self.rate)
        chunks = [mono[a:b] for a, b in window_bounds(len(mono), win, hop)]
        probs = []
        with torch.inference_mode():
            for i in range(0, len(chunks), self.cfg.batch_size):
                batch = [np.asarray(c, dtype=np.float32) for c in chunks[i : i + self.cfg.batch_size]]
                inputs = self.extractor(batch, sampling_rate=self.rate, return_tensors="pt")
                inputs = {k: v.to(self.cfg.device) for k, v in inputs.items()}
                logits = self.model(**inputs).logits
                probs.append(torch.sigmoid(logits).float().cpu().numpy())
        stacked = np.concatenate(probs, axis=0)
        return stacked.max(axis=0) if self.cfg.pooling == "max" else stacked.mean(axis=0)


def _class_ids(id2label: dict, ontology, checkpoint: str) -> tuple[list[str], int]:
    """Ontology ids of a checkpoint's outputs, and how many were mapped by output index.

    A label that is an ontology id or class name maps directly. A 527-output checkpoint uses
    AudioSet's label index order, so a label spelled differently from the ontology falls back
    to its index there; any other checkpoint with an unknown label is refused.
    """
    labels = [str(id2label[i]) for i in range(len(id2label))]
    audioset = tagger_classes()
    ids, by_index = [], 0
    for i, label in enumerate(labels):
        try:
            ids.append(ontology.resolve(label))
        except AglError:
            if len(labels) != len(audioset):
                raise AglError(f"checkpoint '{checkpoint}': output {i} label '{label}' is not an "
                               "AudioSet class; use an AudioSet audio-classification checkpoint") from None
            ids.append(audioset[i])
            by_index += 1
    if len(set(ids)) != len(ids):
        raise AglError(f"checkpoint '{checkpoint}': two outputs map to the same AudioSet class")
    return ids, by_index


class SpeechDetector:
    """silero-vad: seconds of speech in a 16 kHz mono clip (its ONNX model, run by
    agl.core.vad without torch: the package's segments, sample for sample)."""

    def __init__(self, threshold: float = 0.5):
        self.threshold = threshold

    def speech_seconds(self, mono16k) -> float:
        stamps = speech_timestamps(mono16k, threshold=self.threshold, return_seconds=True)
        return float(sum(s["end"] - s["start"] for s in stamps))


@dataclass(frozen=True)
class ClipTags:
    """One clip's tags. `status`: ok | missing | unreadable. Scores None when not measured."""

    key: str
    status: str
    tagger: str
    categories: dict[str, float]
    seconds: float | None = None
    speech_seconds: float | None = None
    speech_fraction: float | None = None
    error: str | None = None
    class_scores: Any = None  # numpy array aligned with TagRun.class_ids, or None


@dataclass
class TagRun:
    """Every clip's tags, the tagger's class ids and what was run (`tag_clips`' result)."""

    tags: list[ClipTags]
    class_ids: list[str]
    wall_s: float
    info: dict[str, Any]

    def frame(self):
        """One row per clip (tags.csv): status, the 8 category columns and speech."""
        import pandas as pd

        rows = []
        for t in self.tags:
            row = {"key": t.key, "status": t.status, "tagger": t.tagger}
            row.update({c: t.categories.get(c, math.nan) for c in CATEGORY_COLUMNS})
            row.update(seconds=t.seconds, speech_seconds=t.speech_seconds,
                       speech_fraction=t.speech_fraction, error=t.error)
            rows.append(row)
        cols = ["key", "status", "tagger", *CATEGORY_COLUMNS, "seconds", "speech_seconds",
                "speech_fraction", "error"]
        return pd.DataFrame(rows, columns=cols)

    def class_frame(self):
        """Full class scores, one column per ontology id (none for `precomputed`)."""
        import numpy as np
        import pandas as pd

        data = [t.class_scores if t.class_scores is not None
                else np.full(len(self.class_ids), np.nan) for t in self.tags]
        frame = pd.DataFrame(np.vstack(data) if data and self.class_ids else None,
                             columns=self.class_ids)
        frame.insert(0, "key", [t.key for t in self.tags])
        return frame

    def summary(self) -> dict[str, Any]:
        """Counts and settings for the stage's summary (`wall_s` is a timing: the stage keeps it
        out of its DVC outputs)."""
        ok = [t for t in self.tags if t.status == "ok"]
        speech = [t.speech_fraction for t in ok if t.speech_fraction is not None]
        audio_s = sum(t.seconds or 0.0 for t in ok)
        return {
            **self.info,
            "clips": len(self.tags),
            "tagged": len(ok),
            "not_tagged": {s: sum(t.status == s for t in self.tags)
                           for s in sorted({t.status for t in self.tags} - {"ok"})},
            "classes": len(self.class_ids),
            "mean_speech_fraction": round(sum(speech) / len(speech), 4) if speech else None,
            "audio_seconds": round(audio_s, 3),
            "wall_s": round(self.wall_s, 3),
        }


def resolve_ontology(cfg: TagConfig):
    """The AudioSet ontology: `cfg.ontology`, or the pinned release fetched into the cache."""
    path = Path(cfg.ontology) if cfg.ontology else fetch_ontology(cfg.ontology_cache)
    return load_ontology(path)


@dataclass(frozen=True)
class Heard:
    """What a worker heard in one clip (`TagTask.run`): the status, the tagger's pooled class
    scores and the seconds of speech; the driver turns it into the clip's `ClipTags`."""

    status: str  # ok | missing | unreadable | skipped (no audio needed)
    seconds: float | None = None
    scores: Any = None
    speech_seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class TagTask(ClipTask):
    """The tag stage's per-clip work for `agl.executor.map_clips`: decode, the checkpoint's
    class scores (each worker loads it once) and the VAD's speech seconds."""

    cfg: TagConfig

    def setup(self) -> tuple[TransformersTagger | None, SpeechDetector | None]:
        tagger = TransformersTagger(self.cfg) if self.cfg.tagger == "transformers" else None
        return tagger, (SpeechDetector(self.cfg.vad_threshold) if self.cfg.speech == "vad" else None)

    def run(self, state: tuple[TransformersTagger | None, SpeechDetector | None], item: tuple) -> Heard:
        key, path = item
        tagger, vad = state
        if tagger is None and vad is None:
            return Heard("skipped")
        path = Path(path)
        if not path.is_file():
            return Heard("missing", error=f"{path} not found")
        try:
            mono, sr = decode_mono(path)
        except Exception as exc:  # soundfile raises several types for a bad file
            return Heard("unreadable", error=f"{type(exc).__name__}: {exc}".replace("\n", " "))
        seconds = len(mono) / sr if sr else 0.0
        scores = resampled = None
        if tagger is not None:
            resampled = resample(mono, sr, tagger.rate)
            scores = tagger.scores(resampled)
        speech_s = None
        if vad is not None:
            at16k = resampled if tagger is not None and tagger.rate == VAD_RATE else None
            speech_s = vad.speech_seconds(at16k if at16k is not None else resample(mono, sr, VAD_RATE))
        return Heard("ok", seconds, scores, speech_s)


def tag_clips(items: Sequence[tuple[str, Path]], cfg: TagConfig, manifest=None,
              transport: ExecutorConfig | None = None, facts: dict[str, Any] | None = None) -> TagRun:
    """Tag (key, audio path) pairs, heard by `cfg.jobs` processes or where `transport` says
    (agl.executor). `manifest` (a loaded manifest) is needed by `precomputed`."""
    import numpy as np

    t0 = time.perf_counter()
    info: dict[str, Any] = {"tagger": cfg.tagger, "speech": cfg.speech}
    class_ids: list[str] = []
    precomputed: dict[str, dict[str, float]] = {}
    if cfg.tagger == "transformers":
        import pandas as pd

        ontology = resolve_ontology(cfg)
        config, extractor = checkpoint_plan(cfg)
        class_ids, by_index = _class_ids(config.id2label, ontology, cfg.checkpoint)
        membership = column_membership(ontology, class_ids)
        window_s, hop_s = tagger_windows(cfg, extractor)
        info.update(checkpoint=cfg.checkpoint, window_s=window_s, hop_s=hop_s,
                    labels_mapped_by_index=by_index,
                    pooling=cfg.pooling, multi_root_classes=len(multi_root_classes(ontology, class_ids)))
    else:
        if manifest is None:
            raise AglError("the precomputed tagger needs the manifest's category columns")
        by_key = manifest.set_index("key")
        for key, _ in items:
            if key not in by_key.index:
                raise AglError(f"clip {key} is not in the manifest; the precomputed tagger "
                               "reads its category columns from there")
            precomputed[key] = {c: float(by_key.at[key, c]) for c in CATEGORY_COLUMNS}
    heard = map_clips(TagTask(cfg), [(k, Path(p)) for k, p in items], jobs=cfg.jobs, transport=transport,
                      facts=facts)
    out: list[ClipTags] = []
    for (key, _), h in zip(items, heard, strict=True):
        if h.status == "skipped":  # precomputed without the VAD: no audio read
            out.append(ClipTags(key, "ok", cfg.tagger, precomputed[key]))
            continue
        if h.status != "ok":
            out.append(ClipTags(key, h.status, cfg.tagger, {}, error=h.error))
            continue
        cats = precomputed.get(key, {})
        if h.scores is not None:
            frame = pd.DataFrame([np.asarray(h.scores)], columns=class_ids)
            cats = rollup(frame, membership).iloc[0].to_dict()
        speech_s, fraction = h.speech_seconds, None
        if speech_s is not None:
            fraction = speech_s / h.seconds if h.seconds > 0 else None
        out.append(ClipTags(key, "ok", cfg.tagger, cats, seconds=h.seconds, speech_seconds=speech_s,
                            speech_fraction=fraction, class_scores=h.scores))
    return TagRun(tags=out, class_ids=class_ids, wall_s=time.perf_counter() - t0, info=info)
