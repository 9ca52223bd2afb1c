"""What a run will cost before it runs: requests, audio minutes, tokens, USD.

Audio-language APIs bill audio by duration: Gemini documents 32 tokens per second of audio,
OpenAI's audio models about 10 per second (their price pages); the rate is a model setting
(`audio_tokens_per_s`, default 32), as is the expected reply length (`est_output_tokens`,
default 400). Text tokens are estimated as characters / 4. Clips already finished in the
run folder are not requested again, so they are not counted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agl.backends.base import get_backend
from agl.core import audio
from agl.dataset.manifest import ManifestWarning, clips, load_manifest
from agl.inference.finalize import PREDICTIONS
from agl.inference.long_audio import plan_windows, sent_s
from agl.inference.model_run import run_fingerprint
from agl.inference.runspec import prompt_source
from agl.inference.spend import token_rates
from agl.predictions.records import iter_records
from agl.prompts import PAPER, fetched_source, load_prompt


@dataclass(frozen=True)
class Estimate:
    """What a run would send before it is started: requests, audio, tokens and cost."""

    requests: int
    audio_minutes: float
    input_tokens: int
    output_tokens: int
    cost_usd: float
    note: str = ""  # what the figures leave out (a prompt a dry run did not fetch)
    # The same clips under each long-audio protocol, all of them counted (finished or not):
    # (label, estimate) pairs, for a model that listens (`agl infer --dry-run`).
    modes: tuple[tuple[str, Estimate], ...] = ()

    def line(self) -> str:
        return (
            f"{self.requests} request(s), {self.audio_minutes:.2f} audio minutes, "
            f"~{self.input_tokens:,} input + ~{self.output_tokens:,} output tokens, "
            f"estimated ${self.cost_usd:.4f}" + (f" ({self.note})" if self.note else "")
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "audio_minutes": round(self.audio_minutes, 3),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


def clip_seconds(clip: Any, audio_root: Path | None) -> float:
    """The file's own duration where it is readable, else the manifest's mp3seconds."""
    if audio_root is not None:
        path = Path(audio_root) / clip.relpath
        if path.is_file():
            try:
                return audio.clip_seconds(path)
            except RuntimeError:  # soundfile's LibsndfileError: not a file it can read
                pass
    return float(clip.seconds or 0.0)


def estimate(
    clips: list[Any],
    spec: Any,
    *,
    audio_root: Path | None,
    prompt_text: str,
    finished: set[str] = frozenset(),
    listens: bool = True,
) -> Estimate:
    """What the pending clips cost for the model entry `spec` (its settings, prices and
    `long_audio`): a windowed protocol sends one request per window (fixed cuts: a low-energy
    cut moves a boundary back by at most `search_s`, not the count)."""
    pending = [c for c in clips if c.key not in finished]
    requests, seconds = len(pending), 0.0
    if listens:
        requests = 0
        fixed = dataclasses.replace(spec.long_audio, split="fixed")
        for c in pending:
            length = clip_seconds(c, audio_root)
            if not fixed.windowed or length <= 0:
                requests, seconds = requests + 1, seconds + length
                continue
            wins = plan_windows(length, fixed, key=c.key)
            requests += 1 if fixed.mode == "multi_part" else len(wins)  # parts: one prompt
            seconds += sent_s(wins)
    rate, out_each = token_rates(spec.settings)
    tokens_in = int(round(seconds * rate + requests * len(prompt_text) / 4))
    tokens_out = out_each * requests
    audio_in = int(round(seconds * rate))
    audio_price = getattr(spec, "price_audio_in_per_m", None)  # audio billed apart (Flash, GPT-4o)
    audio_price = spec.price_in_per_m if audio_price is None else audio_price
    cost = ((tokens_in - audio_in) * spec.price_in_per_m + audio_in * audio_price
            + tokens_out * spec.price_out_per_m) / 1e6
    return Estimate(requests, seconds / 60, tokens_in, tokens_out, cost)


def by_mode(rows: list[Any], audio_root: Path | None, prompt_text: str, spec: Any) -> dict[str, Estimate]:
    """The same clips under native, truncate and windows (the entry's window_s), all clips
    counted: what each long-audio protocol would cost (`agl infer --dry-run`)."""
    out = {}
    for mode in ("native", "truncate", "windows"):
        cfg = dataclasses.replace(spec.long_audio, mode=mode, start="first")
        label = mode if mode == "native" else f"{mode} {cfg.window_s:g} s"
        out[label] = estimate(rows, dataclasses.replace(spec, long_audio=cfg), audio_root=audio_root,
                              prompt_text=prompt_text)
    return out


def estimate_run(
    spec: Any,
    infer: Any,
    *,
    manifest: str | Path,
    audio_root: str | Path | None,
    out_dir: str | Path,
    limit: int | None = None,
    fetch: bool = True,
    sources: Any = None,
) -> Estimate:
    """The estimate for `agl infer --dry-run` and the stages: what `run_spec` would request.

    With `fetch` False nothing is downloaded: a prompt read from a published file that is not
    cached yet is left out of the token count, and the note says what the run would fetch."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        rows = clips(load_manifest(manifest))
    limit = limit if limit is not None else infer.limit
    rows = rows[:limit] if limit is not None else rows
    name, source = spec.prompt or infer.prompt, prompt_source(spec, infer)
    if not fetch and name == PAPER and source is not None and fetched_source(source, sources)[1] is None:
        url = fetched_source(source, sources)[0]
        est = estimate(rows, spec, audio_root=Path(audio_root) if audio_root else None, prompt_text="",
                       listens=bool(getattr(get_backend(spec.backend), "needs_audio", True)))
        note = (f"prompt {PAPER} not fetched in a dry run: the run fetches {source} from {url} "
                "into cache/sources/ once; its text tokens are not counted here")
        return dataclasses.replace(est, note=note)
    prompt = load_prompt(name, source=source, sources=sources)
    fingerprint = run_fingerprint(spec.backend, spec.model, spec.settings, prompt.sha256, spec.long_audio)
    pred_path = Path(out_dir) / PREDICTIONS
    finished = set()
    if pred_path.exists():
        finished = {
            p.sample_id for p in iter_records(pred_path) if p.finished and p.meta.get("run_fingerprint") == fingerprint
        }
    listens = bool(getattr(get_backend(spec.backend), "needs_audio", True))
    root = Path(audio_root) if audio_root else None
    modes = tuple(by_mode(rows, root, prompt.text, spec).items()) if listens else ()
    est = estimate(rows, spec, audio_root=root, prompt_text=prompt.text, finished=finished, listens=listens)
    return dataclasses.replace(est, modes=modes)
