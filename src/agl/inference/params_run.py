"""One model of params.yaml run over a manifest: `run_spec` and what it needs around the driver.

`run_spec(spec, infer, target)` resolves a params.yaml model entry (`agl.inference.runspec`)
and the `infer:` settings into the driver's options, runs it (`agl.inference.model_run`), then
its repeats, each into a run folder of its own; `summary_line` says in one line what a run did,
`gone_line` what to do when the provider has retired the model.
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agl.backends.base import Backend, get_backend
from agl.backends.endpoints import pool_capacity
from agl.contracts.models import ModelSpec
from agl.core import diskwrite
from agl.core.paths import remove
from agl.core.secrets import scrub
from agl.core.workspace import shared_path
from agl.dataset.checksums import read_source
from agl.dataset.manifest import ManifestWarning, load_manifest
from agl.dataset.manifest import clips as manifest_clips
from agl.errors import AglError, ModelGone
from agl.executor.config import ExecutorConfig
from agl.inference.executors import summary_text
from agl.inference.model_run import run_inference
from agl.inference.runner import Backoff, RunOptions
from agl.inference.runspec import InferSettings, prompt_source
from agl.inference.spend import TOTAL_ROOTS
from agl.prompts import Prompt, load_prompt


@dataclass(frozen=True)
class RunTarget:
    """Where a model run reads and writes: the manifest, its audio, the run folder, and where a
    replica pool's per-endpoint telemetry goes (a timing: not a DVC output; None: nowhere)."""

    manifest: Path
    audio_root: Path | None
    out_dir: Path
    telemetry: Path | None = None

    def __post_init__(self) -> None:
        # Paths however given (a flag's text); an empty audio root is none, as a missing one.
        object.__setattr__(self, "manifest", Path(self.manifest))
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        object.__setattr__(self, "audio_root", Path(self.audio_root) if self.audio_root else None)
        if self.telemetry is not None:
            object.__setattr__(self, "telemetry", Path(self.telemetry))


def run_spec(spec: ModelSpec, infer: InferSettings, target: RunTarget, *, limit: int | None = None,
             progress: bool = True, sources: Any = None,
             transport: ExecutorConfig | None = None) -> dict[str, Any]:
    """Run one model of params.yaml over `target.manifest`; returns the run summary.

    A model served by several replicas (`base_url` a list, see agl.backends.endpoints) runs with the
    replicas' total concurrency unless the entry sets its own; the returned summary (not the
    file) gains `endpoints` (requests, failures, latency per endpoint), also written to
    `target.telemetry` when given: timings stay out of DVC's outputs. `sources` (a SourceConfig)
    resolves a `paper:<name>` prompt source (default: params.yaml's `paper:` in the working
    directory; a stage passes the keys it declared). `transport`: params.yaml `executor:`
    (None: local), this model's overrides applied here."""
    with warnings.catch_warnings():
        warnings.simplefilter("default", ManifestWarning)
        frame = load_manifest(target.manifest)
    prompt = load_prompt(spec.prompt or infer.prompt, source=prompt_source(spec, infer),
                         sources=sources)
    capacity = pool_capacity(spec.settings) if spec.backend == "openai-compatible" else None
    backend = None
    if capacity is not None:
        backend = get_backend(spec.backend)(spec.model, **spec.settings)
    options = RunOptions(
        cache_dir=shared_path(infer.cache_dir) if infer.cache_dir else None,
        concurrency=int(spec.concurrency or capacity or infer.concurrency),
        timeout_s=float(infer.timeout_s), max_retries=int(infer.max_retries),
        backoff=Backoff(retry_after_cap_s=float(infer.retry_after_cap_s)),
        progress=progress, limit=limit if limit is not None else infer.limit,
        max_reply_bytes=int(infer.max_reply_bytes), max_batch_bytes=int(infer.max_batch_bytes),
        offline_after=int(infer.offline_after),
        transport=(transport or ExecutorConfig()).for_model(spec.name),
        send_tags=tags_intervention(target.manifest.parent),
        max_spend_usd=infer.max_spend_usd,
        max_total_spend_usd=infer.max_total_spend_usd,
        spend_roots=TOTAL_ROOTS,
    )
    try:
        summary = run_inference(spec, prompt, manifest_clips(frame), out_dir=target.out_dir,
                                audio_root=target.audio_root, options=options, backend=backend)
        repeats = _run_repeats(spec, prompt, manifest_clips(frame), target, options, backend,
                               int(infer.repeats))
        if repeats:
            summary = {**summary, "repeats": repeats}
    except ModelGone as exc:
        raise ModelGone(gone_line(spec, exc), model=exc.model,
                        provider_message=exc.provider_message) from None
    if backend is not None:
        summary = {**summary, "endpoints": backend.endpoint_report()}
        if target.telemetry is not None:
            diskwrite.write_text(target.telemetry, json.dumps(scrub({"run": spec.name,
                                                                     "endpoints": summary["endpoints"]}),
                                                              indent=2) + "\n")
    return summary


def tags_intervention(data: Path) -> bool:
    """Whether `data` is the `tags` intervention's derived dataset (its lock says so): its
    files go out as published, tags and all (agl.counterfactual.perturb)."""
    try:
        source = read_source(data / "lock.json") or {}
    except AglError:
        return False
    iv = source.get("intervention") if isinstance(source, dict) else None
    return isinstance(iv, dict) and iv.get("kind") == "tags"


REPEATS = "repeats"  # <run>/repeats/<k>/: repeat k's run folder (a DVC output, empty for one run)


def _run_repeats(spec: ModelSpec, prompt: Prompt, clips: list[Any], target: RunTarget,
                 options: RunOptions, backend: Backend | None, n: int) -> list[dict[str, Any]]:
    """Repeats 1..n-1 of the run, each a run of its own into <run>/repeats/<k>/ (resumable,
    cached by its repeat index); a folder of a repeat past n (a smaller `repeats`) goes."""
    folder = Path(target.out_dir) / REPEATS
    folder.mkdir(parents=True, exist_ok=True)  # always there: the stage declares it
    for old in folder.iterdir():
        if not (old.is_dir() and old.name.isdigit() and 1 <= int(old.name) < n):
            remove(old)
    out = []
    for k in range(1, n):
        s = run_inference(spec, prompt, clips, out_dir=folder / str(k), audio_root=target.audio_root,
                          options=replace(options, repeat=k), backend=backend)
        print(f"repeat {k}: {summary_line(s)}", file=sys.stderr)
        out.append(s)
    return out


def gone_line(spec: ModelSpec, exc: ModelGone) -> str:
    """One line: the model, the provider's message, and where to find what to run instead.
    (The roster's successor is added by `agl infer`, agl.commands.infer: reading the roster
    here would make every infer stage depend on roster.yaml.)"""
    return (f"model '{spec.model}' (run {spec.name}) is gone ({exc.provider_message}); "
            "nothing was cached and the run stopped at that request; `agl models` names the "
            "roster's successor, `agl models --check` what the provider serves")


def summary_line(summary: dict[str, Any], *,
                 retry: str = "rerun the same command to retry the failures") -> str:
    """One line (plus one per replica) saying what a run did: counts by status, requests made
    this time and from cache, cost, batch jobs, and what to do about failures (`retry`: the
    command that retries them where the caller is, e.g. a DVC stage's)."""
    s = summary
    line = (f"{s['backend']}:{s['model'] or '-'}: {s['n_recorded']}/{s['n']} clips "
            f"(ok {s['n_ok']}, partial {s['n_partial']}, refused {s['n_refused']}, "
            f"unparseable {s['n_unparseable']}, failed {s['n_failed']}"
            + (f", truncated {s['n_truncated']} (cut at the output limit: raise the model's "
               "max tokens, or its thinking budget's headroom)" if s.get("n_truncated") else "")
            + "); "
            f"{s['session_requests']} request(s) this time, {s['session_cache_hits']} from cache, "
            f"${s.get('session_cost_usd', 0.0):.4f} spent; the run's answers cost ${s['cost_usd']:.4f}")
    if s.get("n_not_asked"):
        line += (f"; {s['n_not_asked']} clip(s) not asked: the next request would have passed "
                 "a spend cap (infer.max_spend_usd or infer.max_total_spend_usd); rerun with a "
                 "higher cap to ask only them")
    elif s["n_failed"]:
        line += f"; {retry}"
    line += summary_text(s)
    if s.get("served_models"):  # the served-model ledger (agl.predictions.served)
        shares = ", ".join(f"{m} {v:.0%}" for m, v in s["served_models"].items())
        line += f"\n  served by: {shares} (of {s['served_clips']} clip(s) that named one)"
    for flag in [*(s.get("served_flags") or []), *([s["heard_flag"]] if s.get("heard_flag") else [])]:
        line += f"\n  WARNING: {flag}"
    for e in s.get("endpoints") or []:
        lat = e["latency_s"]["p50"] if e["latency_s"] else None
        line += (f"\n  {e['url']}: {e['requests']} request(s), {e['failures']} failed"
                 + (f", p50 {lat:.3f} s" if lat is not None else ""))
    return line
