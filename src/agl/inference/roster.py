"""The paper's 16 models as `models:` entries (`src/agl/data/roster.yaml`), validated.

Each entry is a `params.yaml` `models:` entry (checked by `agl.contracts.models.parse_models`) plus
`needs`: what running it takes (an API key variable, GPU memory, a server to start). An entry
comes in two protocols (issue 32): `controlled` (its top-level fields: temperature 0, 512
tokens, the providers' own SDKs) and `paper` (its `paper:` block, which replaces the backend,
model, settings, needs or concurrency it names: the authors' runner, openllm.py, setting by
setting). `retired: <date>, <source>` marks a model id its provider no longer serves, and
`successor` the id to suggest instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from agl.contracts.models import ModelSpec, parse_models
from agl.errors import AglError, reject_unknown_keys
from agl.prompts import PAPER

PAPER_PROMPT_SOURCE = "paper:qwen25-omni"
PROTOCOLS = ("controlled", "paper")
_OVERRIDABLE = {"backend", "model", "settings", "needs", "concurrency"}
_ROSTER_ONLY = {"needs", "paper", "retired", "successor", "family"}


@dataclass(frozen=True)
class RosterEntry:
    """A model the project knows how to run, and what running it needs."""

    spec: ModelSpec
    key: str | None  # environment variable holding the API key, if any
    gpu_gb: float | None  # planning figure for bfloat16 weights + one batch
    server: str | None  # the command that starts its OpenAI-compatible server
    retired: str | None = None  # "<date>, <source>": the provider no longer serves `spec.model`
    successor: str | None = None  # the model id to suggest when `spec.model` is gone
    # transformers entries: the checkpoint's config.model_type (what it hears by default:
    # agl.backends._families), so `agl models` can say it without the weights
    family: str | None = None


def load_baselines(path: Path | None = None) -> list[RosterEntry]:
    """The roster's `baselines:` (the cascade and the blind baselines: docs/baselines.md),
    checked like params.yaml: entries of no paper row, so one protocol and no paper_name."""
    return load_roster(path, "controlled", section="baselines")


def load_roster(path: Path | None = None, protocol: str = "controlled", *,
                section: str = "models") -> list[RosterEntry]:
    """The roster (`agl/data/roster.yaml`, or `path`) under `protocol` (`controlled` or
    `paper`), every entry checked like params.yaml and recording its protocol."""
    from agl.core.yamlfile import parse_yaml  # duplicate keys, bounds, UTF-8: one line each

    source = path or resources.files("agl") / "data" / "roster.yaml"
    label = str(path or "agl/data/roster.yaml")
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise AglError(f"{label}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    doc = parse_yaml(data, label)
    models = doc.get(section) if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        raise AglError(f"{label}: {section}: expected a mapping of name -> entry")
    baselines = section == "baselines"
    if protocol not in PROTOCOLS:
        raise AglError(f"unknown protocol '{protocol}'; known: {', '.join(PROTOCOLS)}")
    needs: dict[str, dict[str, Any]] = {}
    entries: dict[str, Any] = {}
    marks: dict[str, tuple[str | None, str | None, str | None]] = {}
    for name, e in models.items():
        if not isinstance(e, dict):
            raise AglError(f"{label}: {section}.{name}: expected a mapping")
        if not baselines:
            e = with_protocol(e, protocol, f"{label}: models.{name}")
        marks[name] = (e.get("retired"), e.get("successor"), _family(e, f"{label}: {section}.{name}.family"))
        n = e.get("needs") or {}
        if not isinstance(n, dict):
            raise AglError(f"{label}: models.{name}.needs: expected a mapping of key, gpu_gb, server")
        reject_unknown_keys(n, {"key", "gpu_gb", "server"}, f"{label}: models.{name}.needs")
        needs[name] = n
        # The authors' prompt is the default for the paper's rows, read from their pinned
        # Qwen2.5-Omni result file (every file of their release holds the same question).
        # (a baseline naming its own prompt, the cascade's, reads no published file)
        defaults = {} if "prompt" in e else {"prompt": PAPER, "prompt_source": PAPER_PROMPT_SOURCE}
        entries[name] = {**defaults, **{k: v for k, v in e.items() if k not in _ROSTER_ONLY},
                         "protocol": protocol}
    specs = parse_models(entries, source=label)
    out = []
    for spec in specs:
        n = needs[spec.name]
        if spec.paper_name is None and not baselines:
            raise AglError(f"{label}: models.{spec.name}.paper_name: required in the roster")
        room_to_think(spec.settings, f"{label}: models.{spec.name}.settings")
        out.append(RosterEntry(spec, n.get("key"), n.get("gpu_gb"), n.get("server"),
                               *marks[spec.name]))
    return out


def _family(e: dict[str, Any], where: str) -> str | None:
    """A transformers entry's `family` (a model_type of the family table), checked."""
    from agl.backends.local_transformers import known_families  # numpy: only to check a family

    fam = e.get("family")
    if fam is not None and fam not in known_families():
        raise AglError(f"{where}: '{fam}' is not a family of agl.backends._families "
                       f"({', '.join(known_families())})")
    return fam


def room_to_think(settings: dict[str, Any], where: str) -> None:
    """A thinking budget inside the output limit it counts against leaves no room for the
    answer: the limit must exceed the budget (Gemini counts thoughts in max_output_tokens)."""
    budget, limit = settings.get("thinking_budget"), settings.get("max_output_tokens")
    if isinstance(budget, int) and budget > 0 and isinstance(limit, int) and limit <= budget:
        raise AglError(f"{where}: max_output_tokens {limit} is not above thinking_budget "
                       f"{budget}; thinking counts against the limit, so the answer would be "
                       "cut (status truncated): raise max_output_tokens")


def with_protocol(e: dict[str, Any], protocol: str, where: str) -> dict[str, Any]:
    """The entry `e` under `protocol`: its `paper:` block's fields replace the top-level ones."""
    if protocol == "controlled":
        return e
    block = e.get("paper")
    if not isinstance(block, dict):
        raise AglError(f"{where}.paper: expected a mapping of the authors' settings")
    reject_unknown_keys(block, _OVERRIDABLE, f"{where}.paper")
    return {**e, **block}


def retirement(model: str) -> RosterEntry | None:
    """The roster entry (either protocol) that marks the model id `model` retired or names a
    successor for it; None when the roster knows nothing of it."""
    for protocol in PROTOCOLS:
        for r in load_roster(protocol=protocol):
            if r.spec.model == model and (r.retired or r.successor):
                return r
    return None
