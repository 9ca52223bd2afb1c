"""Who the model is, in EEE's terms: a Hugging Face style id, its developer, how it was
reached (deployment) and whether its weights are open, from the roster (agl/data/roster.yaml)
and the run's backend."""

from __future__ import annotations

from functools import cache
from typing import Any

# How a backend reaches its model (EEE model_info.additional_details): an API the provider
# runs, or weights this machine (or a server started by the user) loads.
ACCESS = {
    "gemini": ("externally_managed", "closed_weights", "google"),
    "openai": ("externally_managed", "closed_weights", "openai"),
    "transformers": ("self_deployed", "open_weights", None),
    "openai-compatible": ("self_deployed", "open_weights", None),
}
# This project's baselines: code in this repository, nothing hidden (docs/interchange.md).
BASELINES = ("random", "random-sphere", "prior", "knn", "langprior", "birdrange")
PROJECT = "agl"


@cache
def _roster() -> tuple:
    from agl.inference.roster import load_roster  # only where a record is written

    return tuple(load_roster())


def roster_entry(run: str, model: str, paper_name: str):
    """The roster's entry for a run: by the paper's model name, the run's name, or the model id."""
    name = run.rsplit("/", 1)[-1]
    for e in _roster():
        s = e.spec
        if paper_name and (s.paper_name or "").strip().lower() == paper_name.strip().lower():
            return e
        if s.name in (name, model) or s.model == model:
            return e
    return None


def model_info(doc: dict[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """EEE model_info for a run's metrics.json (`doc`), and its roster entry (or None)."""
    run, model = str(doc.get("run", "")), str(doc.get("model") or doc.get("run", ""))
    entry = roster_entry(run, model, str(doc.get("paper_name") or ""))
    backend = str(doc.get("backend") or "")
    if entry is not None and backend in ("replay", ""):  # an authors' run: the model they ran
        backend, model = entry.spec.backend, entry.spec.model
    deployment, availability, developer = ACCESS.get(backend, ("unknown", "unknown", None))
    if backend in BASELINES:
        deployment, availability, developer = "self_deployed", "open_weights", PROJECT
    if "/" in model:
        developer, _ = model.split("/", 1)
        model_id = model
    else:
        developer = developer or "unknown"
        model_id = f"{developer}/{model}"
    details = {"deployment_type": deployment, "model_availability": availability,
               "agl_backend": backend or "unknown", "agl_run": run}
    if entry is not None:
        details["agl_roster_entry"] = entry.spec.name
    info: dict[str, Any] = {"name": str(doc.get("paper_name") or model), "id": model_id,
                            "developer": developer, "additional_details": details}
    if deployment == "externally_managed":
        info["inference_platform"] = developer
    elif backend in ("transformers", "openai-compatible") and doc.get("source") != "published":
        # (an authors' run: how they served it is theirs to say)
        info["inference_engine"] = {"name": "transformers" if backend == "transformers" else "vllm"}
    if settings.get("base_url") and backend == "openai-compatible":
        details["agl_served_at"] = "an OpenAI-compatible server (settings.base_url)"
    return info, entry


def datastore_dirs(model_id: str) -> tuple[str, str]:
    """The datastore's <developer>/<model> folders: the id's prefix, the rest flattened."""
    developer, _, rest = model_id.partition("/")
    return _safe(developer), _safe(rest.replace("/", "_") or developer)


def _safe(part: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in part).strip(".") or "unknown"
