"""The `infer:` section of params.yaml validated into a frozen record, and the helpers that
find a `models:` entry (`agl.contracts.models`) and its prompt source.

Errors name the file and the key (`params.yaml: models[2].backend: ...`), so a typo is one
clear line instead of a traceback from deep inside a run. `agl.inference.params_run.run_spec`
runs one of these models.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agl.backends.base import get_backend, model_or_default
from agl.contracts.models import ModelSpec, fields_of, parse_models
from agl.core.checks import MAX_REPEATS as MAX_REPEATS  # infer.repeats' bound, for `agl infer --repeats`
from agl.core.checks import check_field_types, check_sections, param_value
from agl.core.reach import OFFLINE_AFTER
from agl.core.retry import MAX_BATCH_BYTES, MAX_REPLY_BYTES, RETRY_AFTER_CAP_S
from agl.core.secrets import check_config
from agl.dataset.sources import SourceConfig
from agl.errors import AglError, reject_unknown_keys
from agl.prompts import PAPER


@dataclass(frozen=True)
class InferSettings:
    """params.yaml `infer:`: what every inference run shares (prompt, concurrency, retries)."""

    prompt: str = "default"
    prompt_source: str | None = None  # the published file `agl1k-paper` reads its text from
    concurrency: int = 4
    timeout_s: float = 120.0
    max_retries: int = 5
    # The longest server Retry-After honoured, seconds; past it the clip fails with the
    # server's request named (a 429 asking for a day must not stall the run).
    retry_after_cap_s: float = RETRY_AFTER_CAP_S
    # The largest reply body read (decoded); past it the reply is refused and retried.
    max_reply_bytes: int = MAX_REPLY_BYTES
    max_batch_bytes: int = MAX_BATCH_BYTES  # a batch job's status or result file
    cache_dir: str | None = "cache/responses"
    limit: int | None = None
    # Each clip asked this many times (1: once). Repeats 1..N-1 go to <run>/repeats/<k>/,
    # each its own cached request and draw; evaluate reports their stability.
    repeats: int = 1
    # Failures to connect (name not resolved, refused, no route) before any request reached
    # the server, after which the run stops in one line (agl.core.reach): offline, a run
    # retried every clip for hours.
    offline_after: int = OFFLINE_AFTER
    # Stop sending before this run's spend (USD, at the entry's prices) would pass this; the
    # clips not asked are recorded so, and a rerun with a higher cap asks only them (null: no
    # cap; agl.inference.spend, docs/inference.md#a-spend-cap).
    max_spend_usd: float | None = None
    # One total for the whole build (a `dvc repro`): stop sending before the spend recorded by
    # every run under build/runs and build/listen, plus this run's, would pass this. A guard
    # read from outside the stage's deps, never part of a result (null: no total, nothing read).
    max_total_spend_usd: float | None = None


def parse_infer(section: Any, source: str = "params.yaml") -> InferSettings:
    """params.yaml `infer:` checked; a bad key or value is one AglError naming it."""
    section = section or {}
    if not isinstance(section, dict):
        raise AglError(f"{source}: infer: expected a mapping")
    reject_unknown_keys(section, fields_of(InferSettings), f"{source}: infer")
    # every number has its rule there (a count of 2.5, a cap of true, 101 repeats: one line)
    s = InferSettings(**{k: param_value(f"infer.{k}", v, source) for k, v in section.items()})
    check_field_types(s, f"{source}: infer")  # `prompt: [1]` was a TypeError traceback
    return s


def find_model(models: list[ModelSpec], name: str, source: str = "params.yaml") -> ModelSpec:
    """The model named `name` (an entry without `model:` gets its backend's default, as
    `agl infer --backend` does), or an AglError listing the names there are."""
    for m in models:
        if m.name == name:
            return with_default_model(m)
    raise AglError(f"{source}: no model named '{name}' under models: "
                   f"({', '.join(m.name for m in models)})")


def model_entry(name: str, entry: Any, source: str, params_path: str | Path) -> ModelSpec:
    """The `models.<name>` entry `entry` validated; None (no such entry) is an AglError listing
    the models of `params_path` there are."""
    if entry is None:
        find_model(parse_models(load_params(params_path).get("models"), source), name, source)
    return with_default_model(parse_models({name: entry}, source)[0])


def with_default_model(spec: ModelSpec) -> ModelSpec:
    """`spec`, its model its backend's `default_model` when it names none: one default
    whatever the entrance (`agl infer --backend`, `--entry`, the stage)."""
    return spec if spec.model else replace(spec, model=model_or_default(spec.backend, spec.model))


def check_listens(spec: ModelSpec, intervention: str, source: str = "params.yaml") -> None:
    """Refuse, in one line and before any work, a model whose perception of a clip does not
    come from the audio it is sent (`Backend.perceives_from_tables`: the cascade reads the
    curation tables made from the original clips) in a listen@ stage: every intervention acts
    on the audio, and the derived clips keep their keys, so such a model would be scored on
    what it was told about the original clip, and report an effect of about nothing as the
    intervention's (docs/counterfactual.md#what-a-model-hears)."""
    if getattr(get_backend(spec.backend), "perceives_from_tables", False):
        raise AglError(
            f"{source}: counterfactual.models: '{spec.name}' (backend {spec.backend}) cannot listen to "
            f"'{intervention}': the interventions change the audio, and this backend reads what the "
            "curation stages heard in the original clips (its perception tables), not the perturbed "
            f"audio; remove '{spec.name}' from counterfactual.models (docs/counterfactual.md#what-a-model-hears)")


def prompt_source(spec: ModelSpec, infer: InferSettings) -> str | None:
    """The model entry's `prompt_source`, else `infer.prompt_source`."""
    return spec.prompt_source or infer.prompt_source


# The params keys a `paper:<name>` prompt source resolves through. A stage declares only
# `paper.published`: a stage's paper prompt must be pinned there by SHA-256 (stage_sources),
# so `paper.base_url` says where the bytes come from, never what they are, and moving it to a
# mirror or a local copy re-runs no model (docs/paper.md, Offline).
SOURCE_PARAMS = ("paper.base_url", "paper.published")


def source_config(p: dict[str, Any]) -> Any:
    """A SourceConfig from `_params.load(*SOURCE_PARAMS)`'s result."""

    paper = {k.split(".", 1)[1]: p[k] for k in SOURCE_PARAMS if p.get(k) is not None}
    return SourceConfig.from_params({"paper": paper})


def stage_sources(p: dict[str, Any], spec: ModelSpec, infer: InferSettings, source: str) -> Any:
    """`source_config(p)` for a stage, refusing a `paper:<name>` prompt source that is not
    pinned by SHA-256 under `paper.published`: an unpinned file could change with
    `paper.base_url`, which the infer and listen stages do not declare."""
    cfg = source_config(p)
    src = prompt_source(spec, infer)
    if (spec.prompt or infer.prompt) != PAPER or not isinstance(src, str) or not src.startswith("paper:"):
        return cfg
    name = src.split(":", 1)[1]
    pinned = cfg.published.get(name)
    if pinned is None or not pinned.sha256:
        raise AglError(f"{source}: models.{spec.name}: prompt_source {src} is not pinned; a "
                       f"stage reads its prompt only from a file pinned by SHA-256: add "
                       f"paper.published.{name} with its path and sha256 (docs/paper.md)")
    return cfg


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """A params file as a dict ({} when empty); a missing or malformed file is an AglError."""
    from agl.core.yamlfile import load_yaml  # the one reader of configuration YAML

    path = Path(path)
    try:
        doc = load_yaml(path)
    except FileNotFoundError:
        raise AglError(f"{path}: not found; run from the repository root") from None
    check_config(doc, str(path))  # no credential: params reach dvc.lock and MLflow
    check_sections(doc, path)  # `evalute:` is no section: its knobs would be ignored
    return doc
