"""The speech stage's outputs, and the spoken language as a clip attribute for breakdowns.

* speech.csv: one row per clip: status, seconds of speech, the identified language (Whisper
  code and English name) and its probability, the top candidates, windows read;
* speech_windows.jsonl: per clip, the speech segments (clip seconds) and every language-ID
  window with the spans it joined and its own top languages (and the transcript with
  `transcribe: true`: free text goes to JSON Lines, never CSV; `cut_at_s` for a clip longer
  than `max_listen_s`, heard up to it);
* speech_summary.json: the model's identity (name, source, file SHA-256s, licence), the VAD's,
  the thresholds, counts. No timings (those go to speech_summary.timings.json).

What is bit-stable: on one machine every byte, whatever the thread count (the VAD runs on one
thread; the mel features are summed in a fixed order, agl.speech.mel; CTranslate2's encoder
pass is deterministic). Across CPUs, CTranslate2 and ONNX Runtime
pick kernels by instruction set (AVX2, AVX-512, NEON), so the last float digits can differ.
With `compute_type: float32` (the default) that noise is ~1e-6 in a language probability (a
test perturbs a quarter of the samples by one float32 step: the probabilities move < 1e-5),
far below the `PROB_DECIMALS` (3) written, so the tables repeat except for a value within
~1e-6 of a rounding edge or of `min_language_probability`. With `int8` they do not: its
dynamic quantisation moves a probability by up to 0.07 under the same one-step perturbation,
so int8 digits are not reproducible across machines. The VAD's segments (float32 ONNX,
milliseconds) can move only where a frame's speech probability sits at `vad_threshold`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agl.core.canonical import jsonl_line
from agl.executor.config import ExecutorConfig
from agl.speech.census import language_name
from agl.speech.heard import listen_clips
from agl.speech.listen import ClipSpeech, SpeechConfig
from agl.speech.model import resolve, vad_identity

PROB_DECIMALS = 3
COLUMNS = [
    "key", "status", "speech_heard", "language", "language_name", "language_probability",
    "candidates", "seconds", "speech_seconds", "windows_read", "speech_windows", "error",
]  # fmt: skip
# Group names of the clip attribute `spoken_language` besides the languages themselves.
NO_SPEECH = "no speech"
UNCERTAIN = "speech, language uncertain"
NOT_LISTENED = "not listened"


def _p(x: float) -> float:
    return round(float(x), PROB_DECIMALS)


def frame(results: Sequence[ClipSpeech]):
    """speech.csv rows, sorted by key."""
    import pandas as pd

    rows = []
    for r in results:
        listened = r.status in ("ok", "uncertain", "no_speech")
        rows.append({
            "key": r.key, "status": r.status,
            "speech_heard": (r.status in ("ok", "uncertain")) if listened else None,
            "language": r.language or "", "language_name": language_name(r.language) if r.language else "",
            "language_probability": _p(r.probability) if r.probability is not None else None,
            "candidates": "; ".join(f"{c} {_p(p):.{PROB_DECIMALS}f}" for c, p in r.languages),
            "seconds": round(r.seconds, 3) if r.seconds is not None else None,
            "speech_seconds": round(r.speech_seconds, 3) if r.speech_seconds is not None else None,
            "windows_read": len(r.windows) if listened else None,
            "speech_windows": r.speech_windows if listened else None,
            "error": r.error or "",
        })  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS).sort_values("key", kind="stable")


def windows_jsonl(results: Sequence[ClipSpeech]) -> str:
    """speech_windows.jsonl: per clip, its segments and the language-ID windows read."""
    out = []
    for r in sorted(results, key=lambda r: r.key):
        doc: dict[str, Any] = {
            "key": r.key, "status": r.status,
            "segments": [[round(s, 3), round(e, 3)] for s, e in r.segments],
            "windows": [{**w.as_dict(), "top": [[c, _p(p)] for c, p in w.top]} for w in r.windows],
        }  # fmt: skip
        if r.transcript is not None:
            doc["transcript"] = r.transcript
        if r.cut:  # only its first `seconds` (speech.max_listen_s) were heard
            doc["cut_at_s"] = round(r.seconds or 0.0, 3)
        out.append(jsonl_line(doc))
    return "".join(out)


def run_speech(items: Sequence[tuple[str, Path]], cfg: SpeechConfig, transport: ExecutorConfig | None = None,
               facts: dict[str, Any] | None = None) -> tuple[list[ClipSpeech], dict[str, Any], float]:
    """The speech stage's one call: every (key, audio path) listened to where `cfg.jobs` and
    `transport` say (agl.executor; no model loaded with `enabled: false`); returns the results,
    the summary (a DVC output) and the wall seconds. `facts`: where the clips were heard."""
    t0 = time.perf_counter()
    # The model's and the VAD's identity, resolved here first: the packaged model's parts are
    # joined into cache_dir once, before any worker looks for them.
    identity = resolve(cfg.model, Path(cfg.cache_dir), cfg.sha256).as_dict() if cfg.enabled else None
    vad = vad_identity() if cfg.enabled else None
    results = listen_clips(items, cfg, transport, facts)
    return results, summary(results, cfg, identity, vad), time.perf_counter() - t0


def summary(results: Sequence[ClipSpeech], cfg: SpeechConfig, identity: dict[str, Any] | None,
            vad: dict[str, Any] | None) -> dict[str, Any]:
    """The stage's metrics file (a DVC output: no timings)."""
    listened = [r for r in results if r.status in ("ok", "uncertain", "no_speech")]
    langs = Counter(r.language for r in results if r.language)
    return {
        "enabled": cfg.enabled,
        "model": identity,
        "vad": vad,
        "thresholds": cfg.thresholds(),
        "compute": {"device": cfg.device, "compute_type": cfg.compute_type, "cpu_isa": cfg.cpu_isa},
        "clips": len(results),
        "listened": len(listened),
        "statuses": {s: sum(r.status == s for r in results) for s in sorted({r.status for r in results})},
        "speech_heard": sum(r.status in ("ok", "uncertain") for r in results),
        "languages": dict(sorted(langs.items(), key=lambda kv: (-kv[1], kv[0]))),
        "audio_seconds": round(sum(r.seconds or 0.0 for r in listened), 3),
        "speech_seconds": round(sum(r.speech_seconds or 0.0 for r in listened), 3),
        "windows_read": sum(len(r.windows) for r in listened),
        # clips longer than speech.max_listen_s, heard up to it (speech_windows.jsonl: cut_at_s)
        "clips_cut": sum(r.cut for r in listened),
    }


def timings(results: Sequence[ClipSpeech], wall_s: float) -> dict[str, Any]:
    audio = sum(r.seconds or 0.0 for r in results)
    return {"wall_s": wall_s, "audio_seconds": audio, "x_real_time": audio / max(wall_s, 1e-9),
            "vad_s": sum(r.extra.get("vad_s", 0.0) for r in results),
            "lid_s": sum(r.extra.get("lid_s", 0.0) for r in results)}


# --- the clip attribute -----------------------------------------------------------------------


def spoken_language(table: Path | str) -> dict[str, str]:
    """key -> the clip's spoken-language group: a language's English name, or NO_SPEECH,
    UNCERTAIN, NOT_LISTENED. The attribute other breakdowns and counterfactual groups read."""
    import pandas as pd

    t = pd.read_csv(table, keep_default_na=False, dtype=str)
    out = {}
    for key, status, name in zip(t["key"], t["status"], t["language_name"], strict=True):
        out[str(key)] = {"ok": name, "uncertain": UNCERTAIN, "no_speech": NO_SPEECH}.get(status, NOT_LISTENED)
    return out


def attach(scored, table: Path | str, column: str = "spoken_language"):
    """A copy of a per-clip frame (`sample_id` or `key`) with the spoken-language group added
    (clips the stage did not see: NOT_LISTENED)."""
    groups = spoken_language(table)
    ids = scored["sample_id"] if "sample_id" in scored else scored["key"]
    return scored.assign(**{column: ids.astype(str).map(groups).fillna(NOT_LISTENED)})
