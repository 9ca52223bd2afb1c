"""The acoustic filter: decode every clip once, measure it, and keep or drop it with a reason.

Each clip is decoded once (`agl.core.audio.decode`: soundfile, float32) and measured by the four functions of
`agl.curation.acoustics`: clipping on the decoded channels (a clipped channel is clipped even if the
other is not), the other three on the mono mix (mean of channels). Clips are measured where
`agl.executor.map_clips` runs them: `jobs` processes here, or shards on Ray (`executor:`), the
same rows either way. A missing, empty or undecodable file is a row with its
status and the decoder's message, never a crash, and it does not pass.

Thresholds (defaults in `FilterConfig`, values in params.yaml `filter:`; the paper does not
publish its own), each with the reason code a failing clip gets:

* `near_silence`: rms_dbfs < min_rms_dbfs (-60). Leaves room for very quiet ambiences (a
  recording at -50 dBFS passes); the two real AGL1K clips are -19 and -28, the demo's
  near-silent clips -72.
* `clipping`: clipping_ratio > max_clipping_ratio (0.01). 1% of samples at full scale is
  audible distortion; the real clips have none; the demo's clipped clips 0.22 and 0.26.
* `flat_noise`: spectral_flatness > max_flatness (0.92). White noise is ~0.99 (also after
  MP3), pink noise ~0.6, synthetic streams and surf 0.5-0.84, the real clips 0.10 and 0.29.
* `steady`: aci_norm < min_aci (0.2): mean ACI per (bin, 5 s cluster) within 60 dB of the
  loudest. A constant tone (after MP3) scores ~0, a mains hum 0.25; the real clips 0.60 and
  0.64, the demo's scenes at least 0.52.

* `truncated`: the clip decodes to less than (1 - duration_tolerance) x the manifest's
  `mp3seconds` (0.1: a cut download still decodes and would pass the four measures);
  `too_short`: under `min_seconds` (5 s, one ACI cluster).

A measure that is undefined (NaN: a clip shorter than one analysis frame, or silence for
flatness) fails as `flatness_undefined` / `aci_undefined`, unless the clip already failed
`near_silence`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from agl.core import canonical
from agl.core.audio import decode, duration_problem
from agl.core.checks import check_params
from agl.curation import acoustics
from agl.dataset.checksums import locked_but_missing
from agl.dataset.manifest import clips, load_manifest
from agl.errors import AglError, reject_unknown_keys
from agl.executor import ClipTask, map_clips
from agl.executor.config import ExecutorConfig


@dataclass(frozen=True)
class FilterConfig:
    """params.yaml `filter:`: the thresholds (see the module docstring) and `jobs`."""

    min_rms_dbfs: float = -60.0
    max_clipping_ratio: float = 0.01
    clip_level: float = 0.999
    max_flatness: float = 0.92
    flatness_band_hz: tuple[float, float] = (100.0, 6000.0)
    flatness_n_fft: int = 2048
    min_aci: float = 0.2
    aci_n_fft: int = 512
    aci_cluster_s: float = 5.0
    aci_floor_db: float = -60.0
    # Duration: `truncated` when the clip decodes to less than (1 - duration_tolerance) x the
    # manifest's mp3seconds (a cut file still decodes, and would pass every measure above);
    # `too_short` under min_seconds (one 5 s ACI cluster: shorter is not a soundscape).
    duration_tolerance: float = 0.1
    min_seconds: float = 5.0
    # Processes here (agl.executor): 1, since on the demo a second one costs more CPU (its
    # imports) than it saves; raise it for AGL1K's 51 hours (docs/curation.md#where-it-runs).
    jobs: int = 1

    @classmethod
    def from_params(cls, params: dict[str, Any] | None, source: str = "params.yaml filter") -> FilterConfig:
        """Build from a params section; an unknown key or a wrong type names the key."""
        params = dict(params or {})
        reject_unknown_keys(params, {f.name for f in fields(cls)}, source)
        check_params("filter", params, source.split()[0])  # the one table (agl.core.checks.PARAMS)
        # every key has its rule there: `jobs: 1.5` was cut to 1, `max_flatness: true` read as 1.0
        kw: dict[str, Any] = {}
        for name, value in params.items():
            default = getattr(cls, name)
            if isinstance(default, tuple):
                kw[name] = tuple(float(v) for v in value)
            else:
                kw[name] = int(value) if isinstance(default, int) else float(value)
        return cls(**kw)


@dataclass(frozen=True)
class ClipFilterResult:
    """One clip's row of the filter table. `status`: ok | missing | empty | unreadable."""

    key: str
    status: str
    passed: bool
    reason: str  # ';'-joined reason codes, '' when passed
    detail: str  # the same in words, with the values that failed
    seconds: float | None = None
    sample_rate: int | None = None
    channels: int | None = None
    rms_dbfs: float | None = None
    spectral_flatness: float | None = None
    clipping_ratio: float | None = None
    aci: float | None = None
    aci_norm: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Measures:
    seconds: float
    sample_rate: int
    channels: int
    rms_dbfs: float
    spectral_flatness: float
    clipping_ratio: float
    aci: float
    aci_norm: float


def measure_signal(data, sr: int, cfg: FilterConfig) -> Measures:
    """All four measures of a decoded (frames, channels) signal."""
    import numpy as np

    # A matrix-vector product mixes channels several times faster than mean(axis=1).
    channels = data.shape[1]
    mono = data @ np.full(channels, 1.0 / channels, dtype=data.dtype) if channels > 1 else data[:, 0]
    aci, aci_norm = acoustics.aci_per_bin_cluster(
        mono, sr, n_fft=cfg.aci_n_fft, cluster_s=cfg.aci_cluster_s, floor_db=cfg.aci_floor_db
    )
    return Measures(
        seconds=data.shape[0] / sr,
        sample_rate=sr,
        channels=int(data.shape[1]),
        rms_dbfs=acoustics.rms_dbfs(mono),
        spectral_flatness=acoustics.spectral_flatness(
            mono, sr, n_fft=cfg.flatness_n_fft, band_hz=cfg.flatness_band_hz
        ),
        clipping_ratio=acoustics.clipping_ratio(data, cfg.clip_level),
        aci=aci,
        aci_norm=aci_norm,
    )


def judge(m: Measures, cfg: FilterConfig) -> tuple[list[str], list[str]]:
    """(reason codes, words) for the thresholds a clip fails; empty lists when it passes."""
    codes: list[str] = []
    words: list[str] = []

    def fail(code: str, text: str) -> None:
        codes.append(code)
        words.append(text)

    silent = m.rms_dbfs < cfg.min_rms_dbfs
    if silent:
        fail("near_silence", f"rms {m.rms_dbfs:.1f} dBFS < {cfg.min_rms_dbfs:g}")
    if m.clipping_ratio > cfg.max_clipping_ratio:
        fail("clipping", f"clipping ratio {m.clipping_ratio:.4f} > {cfg.max_clipping_ratio:g}")
    if math.isnan(m.spectral_flatness):
        if not silent:
            fail("flatness_undefined", "spectral flatness undefined (clip shorter than a frame?)")
    elif m.spectral_flatness > cfg.max_flatness:
        fail("flat_noise", f"spectral flatness {m.spectral_flatness:.3f} > {cfg.max_flatness:g}")
    if math.isnan(m.aci_norm):
        if not silent:
            fail("aci_undefined", "ACI undefined (clip shorter than two FFT frames?)")
    elif m.aci_norm < cfg.min_aci:
        fail("steady", f"ACI per bin and cluster {m.aci_norm:.3f} < {cfg.min_aci:g}")
    return codes, words


def filter_clip(key: str, path: Path, cfg: FilterConfig,
                expected_s: float | None = None) -> ClipFilterResult:
    """Decode, measure and judge one clip; every failure is a row, never an exception.
    `expected_s`: the manifest's mp3seconds, for the `truncated` check."""
    path = Path(path)
    if not path.is_file():
        return ClipFilterResult(key, "missing", False, "missing", f"{path} not found",
                                error="file not found; download the audio first (agl download)")
    try:
        data, sr = decode(path)
    except Exception as exc:  # soundfile raises LibsndfileError, RuntimeError, ValueError...
        msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        return ClipFilterResult(key, "unreadable", False, "unreadable", f"cannot decode {path.name}",
                                error=msg)
    if data.shape[0] == 0:
        return ClipFilterResult(key, "empty", False, "empty", "the file decodes to no samples",
                                sample_rate=sr, channels=int(data.shape[1]), seconds=0.0)
    m = measure_signal(data, sr, cfg)
    # Judged at the precision the table states (agl.core.canonical), so a last-digit difference
    # between machines cannot flip a decision that the written values do not show.
    m = Measures(**{k: canonical.round_value(v, canonical.quantity_of(k)) if isinstance(v, float)
                    else v for k, v in asdict(m).items()})
    codes, words = judge(m, cfg)
    short = duration_problem(m.seconds, expected_s, cfg.duration_tolerance, cfg.min_seconds)
    if short:
        codes.insert(0, short[0])
        words.insert(0, short[1])
    return ClipFilterResult(
        key=key, status="ok", passed=not codes, reason=";".join(codes), detail="; ".join(words),
        **asdict(m),
    )


@dataclass(frozen=True)
class FilterTask(ClipTask):
    """The filter's per-clip work for `agl.executor.map_clips`: items (key, path[, seconds])."""

    cfg: FilterConfig

    def run(self, state: Any, item: tuple) -> ClipFilterResult:
        key, path, *expected = item
        return filter_clip(key, path, self.cfg, *expected)


@dataclass
class FilterRun:
    """Every clip's row, in input order, and how the run went (`run_filter`'s result)."""

    results: list[ClipFilterResult]
    wall_s: float
    jobs: int
    reasons: Counter = field(default_factory=Counter)
    where: dict[str, Any] = field(default_factory=dict)  # the executor's facts (timings only)

    def frame(self):
        """The filter table (filter.csv): one row per clip, `ClipFilterResult`'s columns."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.results],
                            columns=[f.name for f in fields(ClipFilterResult)])

    def summary(self, cfg: FilterConfig) -> dict[str, Any]:
        """Counts by reason and status, throughput and the thresholds used."""
        audio_s = sum(r.seconds or 0.0 for r in self.results)
        reasons: Counter = Counter()
        for r in self.results:
            reasons.update(c for c in r.reason.split(";") if c)
        statuses = Counter(r.status for r in self.results)
        return {
            "clips": len(self.results),
            "passed": sum(r.passed for r in self.results),
            "failed": sum(not r.passed for r in self.results),
            "failed_by_reason": dict(sorted(reasons.items())),
            "status": dict(sorted(statuses.items())),
            "audio_seconds": round(audio_s, 3),
            "wall_s": round(self.wall_s, 3),
            "x_real_time": round(audio_s / self.wall_s, 2) if self.wall_s > 0 else None,
            "jobs": self.jobs,
            "thresholds": {k: (list(v) if isinstance(v, tuple) else v)
                           for k, v in asdict(cfg).items() if k != "jobs"},
        }


def run_filter(items: Sequence[tuple], cfg: FilterConfig, jobs: int | None = None,
               transport: ExecutorConfig | None = None) -> FilterRun:
    """Filter (key, path) or (key, path, manifest seconds) items in order; `jobs` processes
    (default cfg.jobs) or where `transport` says (None: this host)."""
    t0 = time.perf_counter()
    args = [(k, Path(p), *rest) for k, p, *rest in items]
    facts: dict[str, Any] = {}
    results = map_clips(FilterTask(cfg), args, jobs=jobs or cfg.jobs, transport=transport, facts=facts)
    return FilterRun(results=results, wall_s=time.perf_counter() - t0, jobs=facts.get("jobs", 1), where=facts)


def filter_manifest(manifest: Path, audio_root: Path, cfg: FilterConfig,
                    jobs: int | None = None, transport: ExecutorConfig | None = None) -> FilterRun:
    """Filter every clip of a manifest, audio at `<audio_root>/<key>/<mp3name>`.

    A clip the dataset's lock lists whose file is gone is damage, not a "missing" row (DVC
    re-pins data.dvc to whatever data/ holds, so nothing else would say it): refused."""
    listed = clips(load_manifest(manifest))
    lock, gone = locked_but_missing(audio_root, [c.relpath for c in listed])
    if gone:
        raise AglError(f"{len(gone)} clip(s) that {lock} lists have no audio file (e.g. "
                       f"{Path(audio_root) / gone[0]}): the dataset is damaged; run `agl download` "
                       "to restore them")
    items = [(c.key, Path(audio_root) / c.relpath, c.seconds) for c in listed]
    return run_filter(items, cfg, jobs, transport)
