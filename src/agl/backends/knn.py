"""`knn`: a learned baseline that listens, without a language model.

Each clip becomes a cheap timbre fingerprint: the mean and standard deviation over time of a
64-band log-mel spectrogram of its first `max_seconds` (default 30) at 16 kHz, plus the
same statistics of the frame-to-frame spectral change (how eventful the scene is). Features
are z-scored over the manifest and compared by cosine similarity. A clip's answer is taken
from its nearest *other* clips (leave-one-out over the manifest: the clip itself is never
its own neighbour): the country with the largest summed similarity among the `k` nearest
(default 1), then the coordinates, city and continent of the nearest neighbour in that
country.

It is a floor for "what does the sound of a place alone give without any world knowledge",
not a strong model. Recordings of the same place (often by the same recordist) sit near each
other, so leave-one-out over clips lets a clip's neighbour be another recording of the same
street: the baseline peeks. `leave_out` (a unit of agl.scoring.clusters: `clip`, `cell:<deg>`,
`city`, `site:<km>`; default `site:25`, the intervals' unit, as params.yaml's entry: `clip` is
plain leave-one-out, which lets it peek) leaves out every clip of the query's cluster; a clip
whose cluster is the whole manifest has no neighbour and fails (counted, never guessed).
`duplicates` (a table of `agl audit duplicates --json`) joins the clips of each pair sharing an
excerpt into one cluster first, so a re-upload or an excerpt of the query is never its neighbour
(docs/baselines.md#duplicates-and-contamination).

Under `long_audio` (issue 45: `windows`, `truncate`) a request carries one window of its clip,
cut into a file of its own (`Request.window` set): the query is that window's fingerprint,
z-scored with the manifest's statistics and compared with every clip's (the neighbours are
still whole clips, their first `max_seconds`; the query's own cluster still left out).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from agl.backends.base import Backend
from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.core.audio import load_mono
from agl.core.checks import number_setting
from agl.dataset.fingerprints import read_pairs
from agl.errors import AglError
from agl.scoring.clusters import cluster_labels, join, parse_unit

SAMPLING_RATE = 16_000
# Clips of the query's own site (25 km) are never its neighbours: evaluate.resampling_unit's
# default, and params.yaml's entry (one default for `agl infer --backend knn` and the stage).
LEAVE_OUT = "site:25"
N_FFT, HOP, N_MELS = 512, 256, 64
FEATURE_DECIMALS, SIM_DECIMALS = 4, 9


def mel_filterbank(sr: int = SAMPLING_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """Triangular filters on the HTK mel scale, shape (n_mels, n_fft // 2 + 1)."""
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)

    edges = mel_to_hz(np.linspace(hz_to_mel(20.0), hz_to_mel(sr / 2), n_mels + 2))
    bins = np.fft.rfftfreq(n_fft, 1.0 / sr)
    fb = np.zeros((n_mels, bins.size))
    for i in range(n_mels):
        lo, mid, hi = edges[i], edges[i + 1], edges[i + 2]
        rise = (bins - lo) / max(mid - lo, 1e-9)
        fall = (hi - bins) / max(hi - mid, 1e-9)
        fb[i] = np.clip(np.minimum(rise, fall), 0, None)
    return fb


def logmel_features(samples: np.ndarray) -> np.ndarray:
    """A fixed-length vector (4 * N_MELS) from mono samples at SAMPLING_RATE."""
    if samples.size < N_FFT:
        samples = np.pad(samples, (0, N_FFT - samples.size))
    n_frames = 1 + (samples.size - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    frames = samples[idx] * np.hanning(N_FFT)[None, :]
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    logmel = np.log(power @ mel_filterbank().T + 1e-10)
    delta = np.abs(np.diff(logmel, axis=0)) if n_frames > 1 else np.zeros_like(logmel)
    return np.concatenate([logmel.mean(0), logmel.std(0), delta.mean(0), delta.std(0)])


def clip_features(path: Path, max_seconds: float) -> np.ndarray:
    """The log-mel feature vector of a clip's first `max_seconds`."""
    return logmel_features(load_mono(path, SAMPLING_RATE, max_seconds))


def _features_or_none(path: Path, max_seconds: float) -> np.ndarray | None:
    try:
        feats = clip_features(path, max_seconds)
    except Exception:  # soundfile raises LibsndfileError, RuntimeError, ValueError...
        return None
    return feats if np.isfinite(feats).all() else None


class NearestNeighbours(Backend):
    name = "knn"  # its entry in the index (agl.backends)
    deterministic = False  # depends on the whole manifest, which the cache key does not see
    reads_dataset = True  # so a rerun keeps its answers only while every clip is unchanged
    recompute = True  # free and offline: a rerun answers again, never trusts the file
    default_model = "logmel-stats"
    settings_rules: ClassVar[dict[str, str | None]] = {"k": "count", "max_seconds": "positive",
                                                       "leave_out": None, "duplicates": None}

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        self.k = int(number_setting(settings, "k", 1, "count", "knn setting"))
        self.max_seconds = float(number_setting(settings, "max_seconds", 30, "positive", "knn setting"))
        self.leave_out = parse_unit(settings.get("leave_out", LEAVE_OUT), "knn settings.leave_out")
        # `agl audit duplicates --json` output (or its CSV): each pair's clips share one cluster
        self.duplicates = settings.get("duplicates")
        self._index: dict[str, int] = {}
        self._clips: list[Any] = []
        self._sim: np.ndarray | None = None
        self._z: np.ndarray | None = None  # the clips' unit-length z-scored features
        self._stats: tuple[np.ndarray, np.ndarray] | None = None  # the manifest's mean, std

    def prepare(self, clips: Sequence[Any], audio_root: Path | None) -> None:
        if audio_root is None:
            raise AglError("knn baseline listens to every clip of the manifest; pass --audio-root")
        paths = [Path(audio_root) / c.relpath for c in clips]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise AglError(f"knn baseline: {len(missing)} audio file(s) missing, e.g. "
                           f"{missing[0]}; it needs the audio of every manifest clip")
        # Decoding dominates; libsndfile releases the GIL, so threads overlap it.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            got = list(pool.map(lambda p: _features_or_none(p, self.max_seconds), paths))
        # A clip that does not decode is nobody's neighbour (the runner fails it, unsent).
        clips = [c for c, f in zip(clips, got, strict=True) if f is not None]
        if len(clips) < 2:
            raise AglError("knn baseline: the manifest needs at least two decodable clips")
        if self.k > len(clips) - 1:  # k: 1e12 was cut to every other clip without a word
            raise AglError(f"knn setting k: {self.k:,} neighbours, but each clip has at most "
                           f"{len(clips) - 1} (the manifest's {len(clips)} decodable clips less "
                           f"itself); e.g. k: 1")
        feats = np.stack([f for f in got if f is not None])
        # Rounded twice so that the answer is the same on every machine: the features to
        # FEATURE_DECIMALS (log-power statistics; an FFT/BLAS build or MP3 decoder changes
        # only far smaller digits), the similarities to SIM_DECIMALS (BLAS summation order);
        # equal similarities are then broken by manifest order (stable argsort).
        feats = np.round(feats, FEATURE_DECIMALS)
        self._stats = (feats.mean(0), feats.std(0))
        z = (feats - feats.mean(0)) / (feats.std(0) + 1e-8)
        z /= np.linalg.norm(z, axis=1, keepdims=True) + 1e-12
        self._z = z
        sim = np.round(z @ z.T, SIM_DECIMALS)
        np.fill_diagonal(sim, -np.inf)  # leave-one-out: never your own neighbour
        if self.leave_out.kind != "clip" or self.duplicates:  # nor any clip of your own cluster
            labels = cluster_labels(pd.DataFrame({
                "latitude": [c.latitude for c in clips], "longitude": [c.longitude for c in clips],
                "city": [c.city for c in clips], "country": [c.country for c in clips]}), self.leave_out)
            if self.duplicates:  # ... nor a copy of your own recording (the duplicates audit)
                labels = join(labels, [c.key for c in clips], read_pairs(self.duplicates))
            sim[labels[:, None] == labels[None, :]] = -np.inf
        self._sim = sim
        self._clips = list(clips)
        self._index = {c.key: i for i, c in enumerate(clips)}

    async def generate(self, request: Request) -> Reply:
        if self._sim is None:
            raise AglError("knn baseline: prepare(clips) was not called")
        i = self._index.get(request.sample_id)
        if i is None:
            return Reply(ReplyStatus.FAILED, error="clip is not in the manifest given to prepare")
        row = self._sim[i]
        if request.window is not None and request.audio_path is not None:  # one window of it
            row = self._window_row(Path(request.audio_path), row)
            if row is None:
                return Reply(ReplyStatus.FAILED, error="window could not be decoded")
        nearest = [j for j in np.argsort(-row, kind="stable")[: min(self.k, len(row) - 1)]
                   if np.isfinite(row[j])]
        if not nearest:
            return Reply(ReplyStatus.FAILED, error=f"no clip outside its {self.leave_out.name} "
                         "cluster to take an answer from")
        votes: dict[str, float] = defaultdict(float)
        for j in nearest:
            votes[self._clips[j].country] += float(row[j])
        country = max(votes, key=lambda c: (votes[c], c))
        best = next(j for j in nearest if self._clips[j].country == country)
        n = self._clips[best]
        answer = {
            "reasoning": f"nearest clip by log-mel statistics: {n.key} "
                         f"(cosine {float(row[best]):.3f})",
            "city": n.city or None, "country": n.country or None,
            "continent": n.continent or None,
            "latitude": n.latitude, "longitude": n.longitude,
        }
        return Reply(ReplyStatus.OK, text=json.dumps(answer), input_tokens=0, output_tokens=0)

    def _window_row(self, path: Path, row: np.ndarray) -> np.ndarray | None:
        """A window's similarities to every clip (rounded as the clips' are), with the clip's
        own left-out neighbours (`row`'s -inf) still left out."""
        feats = _features_or_none(path, self.max_seconds)
        if feats is None or self._z is None or self._stats is None:
            return None
        mean, std = self._stats
        q = (np.round(feats, FEATURE_DECIMALS) - mean) / (std + 1e-8)
        q /= np.linalg.norm(q) + 1e-12
        out = np.round(self._z @ q, SIM_DECIMALS)
        out[~np.isfinite(row)] = -np.inf
        return out
