"""The `models:` and `infer:` sections of params.yaml, validated into frozen records.

Errors name the file and the key (`params.yaml: models[2].backend: ...`), so a typo is one
clear line instead of a traceback from deep inside a run. `agl.inference.model_run.run_spec`
runs one of these models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl.core.retry import MAX_BATCH_BYTES, MAX_REPLY_BYTES, RETRY_AFTER_CAP_S
from agl.core.secrets import check_config
from agl.dataset.manifest import is_plain_name
from agl.dataset.sources import SourceConfig
from agl.errors import AglError, reject_unknown_keys


@dataclass(frozen=True)
class ModelSpec:
    """One entry of params.yaml `models:`: which backend and model, its settings and prices."""

    name: str  # the run's folder: build/runs/<name>/
    backend: str
    model: str
    settings: dict[str, Any] = field(default_factory=dict)
    price_in_per_m: float = 0.0  # USD per million input tokens
    price_out_per_m: float = 0.0  # USD per million output tokens
    prompt: str | None = None  # overrides infer.prompt for this model
    # overrides infer.prompt_source: the published file `agl1k-paper` reads its text from
    # (a path, an http(s)/file URL or `paper:<name>`, see agl.dataset.sources)
    prompt_source: str | None = None
    concurrency: int | None = None  # overrides infer.concurrency for this model
    paper_name: str | None = None  # the paper's name for this model, for the leaderboard


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


def _fields(cls) -> set[str]:
    return set(cls.__dataclass_fields__)


def parse_models(entries: Any, source: str = "params.yaml") -> list[ModelSpec]:
    """`models:` as a mapping name -> {backend, model, ...} (what dvc.yaml's foreach uses:
    stages are named `infer@<name>`), or as a list of entries that each carry `name`."""
    if isinstance(entries, dict) and entries:
        items = []
        for name, e in entries.items():
            if not isinstance(e, dict):
                raise AglError(f"{source}: models.{name}: expected a mapping with backend, model")
            if "name" in e and e["name"] != name:
                raise AglError(f"{source}: models.{name}.name: differs from its key")
            items.append((f"models.{name}", {**e, "name": str(name)}))
    elif isinstance(entries, list) and entries:
        items = [(f"models[{i}]", e) for i, e in enumerate(entries)]
    else:
        raise AglError(f"{source}: models: expected a non-empty mapping of name -> model")
    out, seen = [], set()
    for label, e in items:
        where = f"{source}: {label}"
        if not isinstance(e, dict):
            raise AglError(f"{where}: expected a mapping with name, backend, model")
        reject_unknown_keys(e, _fields(ModelSpec), where)
        for key in ("name", "backend"):
            if not isinstance(e.get(key), str) or not e[key]:
                raise AglError(f"{where}.{key}: required text")
        name = e["name"]
        if not is_plain_name(name):
            raise AglError(f"{where}.name: '{name}' must be a plain folder name (no '/')")
        if "." in name:
            raise AglError(dotted_name(name, where))
        if name in seen:
            raise AglError(f"{where}.name: '{name}' is used twice")
        seen.add(name)
        settings = e.get("settings") or {}
        if not isinstance(settings, dict):
            raise AglError(f"{where}.settings: expected a mapping")
        # Key-like names at any depth (`extra_body.api_key`, `Authorization`), URLs with
        # user:password@ or ?api-key=: one line naming the field and the variable to use.
        check_config(e, source, label)
        try:
            prices = [float(e.get(k, 0) or 0) for k in ("price_in_per_m", "price_out_per_m")]
            concurrency = None if e.get("concurrency") is None else int(e["concurrency"])
        except (TypeError, ValueError) as exc:
            raise AglError(f"{where}: prices and concurrency must be numbers ({exc})") from None
        out.append(ModelSpec(name=name, backend=e["backend"], model=str(e.get("model") or ""),
                             settings=dict(settings), price_in_per_m=prices[0],
                             price_out_per_m=prices[1], prompt=e.get("prompt"),
                             prompt_source=_text_or_none(e.get("prompt_source"), f"{where}.prompt_source"),
                             concurrency=concurrency, paper_name=e.get("paper_name")))
    return out


def dotted_name(name: str, where: str) -> str:
    """Why a model name may not contain a dot, and the name to use instead (one line)."""
    return (f"{where}: the name '{name}' contains a dot, which DVC reads as nesting "
            f"(dvc.yaml's params `models.${{key}}` would find no 'models.{name}'); use "
            f"'{name.replace('.', '')}' (a run's name is its stage and folder name, not the "
            "model id: that is `model:`)")


def _text_or_none(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise AglError(f"{where}: expected a path, URL or paper:<name> (or leave it out)")
    return value


def parse_infer(section: Any, source: str = "params.yaml") -> InferSettings:
    """params.yaml `infer:` checked; a bad key or value is one AglError naming it."""
    section = section or {}
    if not isinstance(section, dict):
        raise AglError(f"{source}: infer: expected a mapping")
    reject_unknown_keys(section, _fields(InferSettings), f"{source}: infer")
    try:
        s = InferSettings(**section)
        int(s.concurrency), float(s.timeout_s), int(s.max_retries), float(s.retry_after_cap_s)
        int(s.max_reply_bytes), int(s.max_batch_bytes)
    except (TypeError, ValueError) as exc:
        raise AglError(f"{source}: infer: {exc}") from None
    if int(s.concurrency) < 1:
        raise AglError(f"{source}: infer.concurrency: must be at least 1")
    if not float(s.timeout_s) > 0 or not math.isfinite(float(s.timeout_s)):
        raise AglError(f"{source}: infer.timeout_s: must be a positive number of seconds")
    if int(s.max_retries) < 0:
        raise AglError(f"{source}: infer.max_retries: must be 0 or more")
    if not float(s.retry_after_cap_s) >= 0:
        raise AglError(f"{source}: infer.retry_after_cap_s: must be 0 or more seconds")
    for key in ("max_reply_bytes", "max_batch_bytes"):
        if int(getattr(s, key)) < 1:
            raise AglError(f"{source}: infer.{key}: must be a positive number of bytes")
    if s.limit is not None and int(s.limit) < 1:
        raise AglError(f"{source}: infer.limit: must be at least 1 (or null for all clips)")
    return s


def find_model(models: list[ModelSpec], name: str, source: str = "params.yaml") -> ModelSpec:
    """The model named `name`, or an AglError listing the names there are."""
    for m in models:
        if m.name == name:
            return m
    raise AglError(f"{source}: no model named '{name}' under models: "
                   f"({', '.join(m.name for m in models)})")


def prompt_source(spec: ModelSpec, infer: InferSettings) -> str | None:
    """The model entry's `prompt_source`, else `infer.prompt_source`."""
    return spec.prompt_source or infer.prompt_source


# The params keys a `paper:<name>` prompt source resolves through (a stage declares them).
SOURCE_PARAMS = ("paper.base_url", "paper.published")


def source_config(p: dict[str, Any]) -> Any:
    """A SourceConfig from `_params.load(*SOURCE_PARAMS)`'s result."""

    paper = {k.split(".", 1)[1]: p[k] for k in SOURCE_PARAMS if p.get(k) is not None}
    return SourceConfig.from_params({"paper": paper})


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """A params file as a dict ({} when empty); a missing or malformed file is an AglError."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise AglError(f"{path}: not found; run from the repository root") from None
    except yaml.YAMLError as exc:
        raise AglError(f"{path}: not valid YAML ({exc})") from None
    check_config(doc, str(path))  # no credential: params reach dvc.lock and MLflow
    return doc
