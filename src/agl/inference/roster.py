"""The paper's 16 models as `models:` entries (`src/agl/data/roster.yaml`), validated.

Each entry is a `params.yaml` `models:` entry (checked by `agl.contracts.models.parse_models`) plus
`needs`: what running it takes (an API key variable, GPU memory, a server to start).
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


@dataclass(frozen=True)
class RosterEntry:
    """A model the project knows how to run, and what running it needs."""

    spec: ModelSpec
    key: str | None  # environment variable holding the API key, if any
    gpu_gb: float | None  # planning figure for bfloat16 weights + one batch
    server: str | None  # the command that starts its OpenAI-compatible server


def load_roster(path: Path | None = None) -> list[RosterEntry]:
    """The roster (`agl/data/roster.yaml`, or `path`), every entry checked like params.yaml."""
    import yaml

    source = path or resources.files("agl") / "data" / "roster.yaml"
    label = str(path or "agl/data/roster.yaml")
    doc = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
    models = doc.get("models")
    if not isinstance(models, dict):
        raise AglError(f"{label}: models: expected a mapping of name -> entry")
    needs: dict[str, dict[str, Any]] = {}
    entries: dict[str, Any] = {}
    for name, e in models.items():
        if not isinstance(e, dict):
            raise AglError(f"{label}: models.{name}: expected a mapping")
        n = e.get("needs") or {}
        if not isinstance(n, dict):
            raise AglError(f"{label}: models.{name}.needs: expected a mapping of key, gpu_gb, server")
        reject_unknown_keys(n, {"key", "gpu_gb", "server"}, f"{label}: models.{name}.needs")
        needs[name] = n
        # The authors' prompt is the default for the paper's rows, read from their pinned
        # Qwen2.5-Omni result file (every file of their release holds the same question).
        entries[name] = {"prompt": PAPER, "prompt_source": PAPER_PROMPT_SOURCE,
                         **{k: v for k, v in e.items() if k != "needs"}}
    specs = parse_models(entries, source=label)
    out = []
    for spec in specs:
        n = needs[spec.name]
        if spec.paper_name is None:
            raise AglError(f"{label}: models.{spec.name}.paper_name: required in the roster")
        out.append(RosterEntry(spec, n.get("key"), n.get("gpu_gb"), n.get("server")))
    return out
