"""params.yaml `localizability:` validated into a frozen `LocalizabilityConfig`.

Every constant of the method (`agl.curation.localizability` describes it) is a param; a
judge is the offline `lexical` one or an inference backend + model (`JudgeSpec`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from agl.core.checks import check_field_types, check_params
from agl.errors import AglError, reject_unknown_keys


@dataclass(frozen=True)
class JudgeSpec:
    """A judge: the offline `lexical` one, or an inference backend + model (+ settings)."""

    name: str
    backend: str
    model: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LocalizabilityConfig:
    """params.yaml `localizability:` (less `reference`, a path the stage reads): one field per
    constant of the method described in `agl.curation.localizability`."""

    gamma_km: float = 2500.0
    theta: float = 0.0
    rating_max: int = 3
    judges: tuple[JudgeSpec, ...] = (JudgeSpec("lexical", "lexical"),)
    features: str = "judges"  # judges | tags
    target_size: int | None = None
    speech_share: float = 0.5
    speech_from: str = "vad"  # vad | tags
    speech_min_fraction: float = 0.1
    human_sounds_min: float = 0.1
    holdout_fraction: float = 0.3
    seed: int = 0
    error_cap_km: float = 20003.93
    missing_error_km: float = 10000.0
    min_clips_per_side: int = 3
    judge_cache: str = "cache/judges"
    judge_concurrency: int = 4
    judge_timeout_s: float = 120.0
    judge_max_retries: int = 5

    @classmethod
    def from_params(cls, params: dict[str, Any] | None,
                    source: str = "params.yaml localizability") -> LocalizabilityConfig:
        """The config from the params section; an unknown key or a value out of range is
        one line naming it."""
        params = dict(params or {})
        reject_unknown_keys(params, {f.name for f in fields(cls)} | {"reference"}, source)
        check_params("localizability", params, source.split()[0])  # seeds, shares, supports
        params.pop("reference", None)  # a path, read by the stage
        if "judges" in params:
            if not isinstance(params["judges"], list | tuple | None):
                raise AglError(f"{source}.judges: {params['judges']!r} is not a list of judges; e.g. judges: [lexical]")
            params["judges"] = tuple(_judge(j, f"{source}.judges[{n}]")
                                     for n, j in enumerate(params["judges"] or []))
        cfg = cls(**params)
        check_field_types(cfg, source)  # a number given as text or a mapping: one line naming it
        checks = [
            (cfg.features in ("judges", "tags"), "features", "is judges or tags"),
            (cfg.speech_from in ("vad", "tags"), "speech_from", "is vad or tags"),
            # between two keys, which no one key's rule in the table holds
            (cfg.gamma_km < cfg.error_cap_km, "gamma_km", "is in (0, error_cap_km)"),
            (cfg.features == "tags" or bool(cfg.judges), "judges", "lists at least one judge"),
        ]
        for ok, key, what in checks:
            if not ok:
                raise AglError(f"{source}.{key}: must be a value that {what}, "
                               f"got {getattr(cfg, key)!r}")
        names = [j.name for j in cfg.judges]
        if len(set(names)) != len(names):
            raise AglError(f"{source}.judges: judge names must be unique, got {names}")
        return cfg


def _judge(raw: Any, where: str) -> JudgeSpec:
    if raw == "lexical":
        return JudgeSpec("lexical", "lexical")
    if not isinstance(raw, dict) or "backend" not in raw:
        raise AglError(f"{where}: a judge is 'lexical' or {{name, backend, model, settings}}")
    name = str(raw.get("name") or f"{raw['backend']}:{raw.get('model', '')}")
    if raw["backend"] != "lexical" and not raw.get("model"):
        raise AglError(f"{where}: judge '{name}' needs a model")
    return JudgeSpec(name, str(raw["backend"]), str(raw.get("model") or ""),
                     dict(raw.get("settings") or {}))
