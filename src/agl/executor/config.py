"""Where work runs, as opposed to what is asked or computed: params.yaml `executor:`.

Transport, like a model's replicas: which executor answers a clip (inference, listening) or
measures it (the curation stages' per-clip work, `agl.executor.map_clips`) never changes a
record, a run's fingerprint, a cache key or a table's bytes. So the section is read by the
stages outside DVC's params (no stage declares `executor`, tests/test_ray_transport.py checks
it; the stages call `read_transport`): moving a run from this machine to a Ray cluster
re-runs no stage and leaves dvc.lock as it is.

    executor:
      kind: local            # local: this host (the async runner; a process pool of `jobs`)
      ray: {address: null, shards: 16, ...}
      models:                # per model entry (by name), over the two above
        qwen2-audio: {kind: ray, ray: {num_gpus: 1}}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agl.core.checks import check_field_types, check_sections, param_value
from agl.core.secrets import check_config
from agl.core.yamlfile import load_yaml
from agl.errors import AglError, reject_unknown_keys

KINDS = ("local", "ray")


@dataclass(frozen=True)
class RayConfig:
    """`executor.ray`: where the cluster is and how a run is cut into shards."""

    # null: a local Ray instance sized to this machine; "auto": the cluster this node belongs
    # to (`ray start` ran here); "ray://host:10001" or "host:6379": that cluster.
    address: str | None = None
    shards: int = 16  # the pending clips cut into this many interleaved slices
    max_retries: int = 3  # a shard whose node died runs again elsewhere, this many times
    num_cpus: float = 1.0  # per shard task (API backends) or actor (transformers)
    num_gpus: float = 0.0  # per actor of a local transformers family
    actors: int | None = None  # transformers actors; null: one per alive node, at most `shards`
    connect_timeout_s: float = 10.0  # an address that does not answer in time: one line, exit 1


@dataclass(frozen=True)
class ExecutorConfig:
    """`executor:` for one model entry: `kind` and, for `ray`, its `RayConfig`."""

    kind: str = "local"
    ray: RayConfig = RayConfig()
    models: dict[str, Any] = field(default_factory=dict)  # per entry: {kind, ray} overrides

    @classmethod
    def from_params(cls, section: Any, source: str = "params.yaml") -> ExecutorConfig:
        """params.yaml `executor:` checked (None: the default, local); one AglError per bad key."""
        section = section or {}
        if not isinstance(section, dict):
            raise AglError(f"{source}: executor: expected a mapping (kind, ray, models)")
        reject_unknown_keys(section, {"kind", "ray", "models"}, f"{source}: executor")
        models = section.get("models") or {}
        if not isinstance(models, dict):
            raise AglError(f"{source}: executor.models: expected a mapping of model name -> {{kind, ray}}")
        base = _one(section, RayConfig(), f"{source}: executor", "executor.ray")
        for name, entry in models.items():  # checked now: a typo fails before any run
            if not isinstance(entry, dict):
                raise AglError(f"{source}: executor.models.{name}: expected a mapping (kind, ray)")
            reject_unknown_keys(entry, {"kind", "ray"}, f"{source}: executor.models.{name}")
            _one(entry, base.ray, f"{source}: executor.models.{name}", f"executor.models.{name}.ray")
        return replace(base, models=dict(models))

    def for_model(self, name: str, source: str = "params.yaml") -> ExecutorConfig:
        """This config with model `name`'s overrides applied (and no per-model table left)."""
        entry = self.models.get(name)
        if not entry:
            return replace(self, models={})
        merged = _one({"kind": entry.get("kind", self.kind), "ray": entry.get("ray") or {}},
                      self.ray, f"{source}: executor.models.{name}", f"executor.models.{name}.ray")
        return merged

    def with_flags(self, kind: str | None = None, address: str | None = None,
                   shards: int | None = None) -> ExecutorConfig:
        """The command line's `--executor`, `--ray-address` and `--ray-shards` over this config."""
        ray = {k: v for k, v in (("address", address), ("shards", shards)) if v is not None}
        return _one({"kind": kind or self.kind, "ray": ray}, self.ray, "agl infer",
                    "executor.ray") if (kind or ray) else self


def read_transport(params_path: str | Path) -> ExecutorConfig:
    """params.yaml `executor:` under the environment's AGL_EXECUTOR / AGL_RAY_ADDRESS (what a
    cluster job script sets). The infer, listen and curation stages call this instead of
    declaring the section: transport never re-runs a stage (docs/cluster.md)."""
    cfg = ExecutorConfig.from_params(_section(Path(params_path)), str(params_path))
    return cfg.with_flags(os.environ.get("AGL_EXECUTOR") or None, os.environ.get("AGL_RAY_ADDRESS") or None)


def _section(path: Path) -> Any:
    """The `executor:` section of a params file, read as every params reader reads it (a
    missing or malformed file is one AglError)."""
    try:
        doc = load_yaml(path)
    except FileNotFoundError:
        raise AglError(f"{path}: not found; run from the repository root") from None
    check_config(doc, str(path))  # no credential: params reach dvc.lock and MLflow
    check_sections(doc, path)  # `executer:` is no section: its knobs would be ignored
    return doc.get("executor") if isinstance(doc, dict) else None


def _one(section: dict[str, Any], base: RayConfig, where: str, key: str) -> ExecutorConfig:
    """`{kind, ray}` over `base`, validated: each `ray` value by its rule in the one table
    (agl.core.checks.PARAMS, under `key`: `executor.ray` or `executor.models.<name>.ray`)."""
    kind = section.get("kind", "local")
    if kind not in KINDS:
        raise AglError(f"{where}.kind: '{kind}' is not one of {', '.join(KINDS)}")
    ray = section.get("ray") or {}
    if not isinstance(ray, dict):
        raise AglError(f"{where}.ray: expected a mapping ({', '.join(RayConfig.__dataclass_fields__)})")
    reject_unknown_keys(ray, set(RayConfig.__dataclass_fields__), f"{where}.ray")
    # `shards: 2.5` was cut to 2 and `max_retries: true` read as 1
    source = where.split(":")[0]
    ray = {k: v if k == "address" else param_value(f"{key}.{k}", v, source) for k, v in ray.items()}
    cfg = replace(base, **ray)
    check_field_types(cfg, f"{where}.ray")  # address: text or null
    shards, retries = int(cfg.shards), int(cfg.max_retries)
    cpus, gpus, wait = float(cfg.num_cpus), float(cfg.num_gpus), float(cfg.connect_timeout_s)
    actors = None if cfg.actors is None else int(cfg.actors)
    if cfg.address is not None and (not isinstance(cfg.address, str) or not cfg.address.strip()):
        raise AglError(f"{where}.ray.address: expected null, auto, ray://host:port or host:port")
    return ExecutorConfig(kind=kind, ray=RayConfig(address=cfg.address, shards=shards, max_retries=retries,
                                                   num_cpus=cpus, num_gpus=gpus, actors=actors,
                                                   connect_timeout_s=wait))
