"""One entry of params.yaml `models:`: `ModelSpec`, and `parse_models`, its validating parser.

Errors name the file and the key (`params.yaml: models[2].backend: ...`), so a typo is one
clear line instead of a traceback from deep inside a run. `agl.inference.params_run.run_spec`
runs one of these models; evaluate and the report only read their names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agl.contracts.long_audio import NATIVE, LongAudio, parse_long_audio
from agl.core.paths import is_plain_name
from agl.core.secrets import check_config
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
    # USD per million audio input tokens where the provider bills audio apart from text
    # (Gemini 2.x Flash, GPT-4o audio): the reply's `audio_tokens` at this price, its other
    # input tokens at price_in_per_m; None: every input token at price_in_per_m.
    price_audio_in_per_m: float | None = None
    prompt: str | None = None  # overrides infer.prompt for this model
    # overrides infer.prompt_source: the published file `agl1k-paper` reads its text from
    # (a path, an http(s)/file URL or `paper:<name>`, see agl.dataset.sources)
    prompt_source: str | None = None
    concurrency: int | None = None  # overrides infer.concurrency for this model
    paper_name: str | None = None  # the paper's name for this model, for the leaderboard
    # which settings these are (agl.inference.roster.PROTOCOLS): `paper`, the authors' runner
    # setting by setting, or `controlled` (temperature 0, 512 tokens); None: not said
    protocol: str | None = None
    # The model's training data cutoff (ISO date, YYYY-MM-DD): clips uploaded after it cannot
    # be in its training data, and evaluate scores them apart (docs/baselines.md#dates).
    training_cutoff: str | None = None
    # how a clip longer than the model takes is heard (agl.contracts.long_audio): native (the
    # default: the whole file, as the backend takes it), windows, truncate or multi_part
    long_audio: LongAudio = NATIVE


def fields_of(cls) -> set[str]:
    """The field names of a dataclass (the keys a params section may hold)."""
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
        reject_unknown_keys(e, fields_of(ModelSpec), where)
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
            audio_price = (None if e.get("price_audio_in_per_m") is None
                           else float(e["price_audio_in_per_m"]))
            concurrency = None if e.get("concurrency") is None else int(e["concurrency"])
        except (TypeError, ValueError) as exc:
            raise AglError(f"{where}: prices and concurrency must be numbers ({exc})") from None
        out.append(ModelSpec(name=name, backend=e["backend"], model=str(e.get("model") or ""),
                             settings=dict(settings), price_in_per_m=prices[0],
                             price_out_per_m=prices[1], price_audio_in_per_m=audio_price,
                             prompt=e.get("prompt"),
                             prompt_source=_text_or_none(e.get("prompt_source"), f"{where}.prompt_source"),
                             concurrency=concurrency, paper_name=e.get("paper_name"),
                             protocol=_protocol(e.get("protocol"), f"{where}.protocol"),
                             training_cutoff=_iso_date(e.get("training_cutoff"), f"{where}.training_cutoff"),
                             long_audio=parse_long_audio(e.get("long_audio"), f"{where}.long_audio")))
    return out


def dotted_name(name: str, where: str) -> str:
    """Why a model name may not contain a dot, and the name to use instead (one line)."""
    return (f"{where}: the name '{name}' contains a dot, which DVC reads as nesting "
            f"(dvc.yaml's params `models.${{key}}` would find no 'models.{name}'); use "
            f"'{name.replace('.', '')}' (a run's name is its stage and folder name, not the "
            "model id: that is `model:`)")


def _iso_date(value: Any, where: str) -> str | None:
    """A date as YAML gives it (`2024-06-01` parses as a date) or as text, in ISO form."""
    import datetime as dt

    if value is None:
        return None
    if isinstance(value, dt.datetime):
        value = value.date()
    if isinstance(value, dt.date):
        return value.isoformat()
    try:
        return dt.date.fromisoformat(str(value).strip()).isoformat()
    except ValueError:
        raise AglError(f"{where}: {value!r} is not a date; write it as YYYY-MM-DD") from None


def _protocol(value: Any, where: str) -> str | None:
    if value is None or value in ("paper", "controlled"):
        return value
    raise AglError(f"{where}: '{value}' is not a protocol; use paper or controlled")


def _text_or_none(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise AglError(f"{where}: expected a path, URL or paper:<name> (or leave it out)")
    return value
