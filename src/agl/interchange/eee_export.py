"""Evaluated runs as Every Eval Ever 0.3.0 records, in the datastore's layout.

Per run folder (`<run>/metrics.json`, `predictions.jsonl`, `scores_<protocol>.csv`):
`data/<collection>/<developer>/<model>/<uuid>.json` (the aggregate: every headline metric
under each protocol, with its interval and sample count) and `<uuid>_samples.jsonl` (one row
per clip and per-clip metric), linked by the JSONL's SHA-256 in the aggregate.

Nothing comes from the clock: the uuid and evaluation_id come from the data version and the
run's fingerprint, the timestamps from the run itself (`finished_at` in its timings file, else
the time its predictions file was last written), so exporting twice writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import uuid
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical, diskwrite
from agl.dataset.manifest import SYNTHETIC_MARK, ManifestWarning, content_hash, load_manifest
from agl.dataset.prepare import AGL1K_MANIFEST_URL
from agl.errors import AglError
from agl.interchange import eee_schema
from agl.interchange.eee_instances import instance_rows
from agl.interchange.eee_metrics import BENCHMARK, METRICS, Interval, result
from agl.interchange.eee_model import datastore_dirs, model_info
from agl.predictions.served import same_model
from agl.scoring.config import METRIC_BOOTSTRAP


@dataclass(frozen=True)
class ExportConfig:
    """Who publishes (`organization`), the intervals' fallback (params `evaluate`:
    metric_bootstrap, seed) and the distance counted correct in an instance row (`wrong_km`)."""

    organization: str = "agl"
    resamples: int = METRIC_BOOTSTRAP  # metrics.json written before issue 46 does not say
    seed: int = 0
    wrong_km: float = 750.0


def find_runs(roots: list[Path]) -> tuple[list[Path], list[str]]:
    """Every `<root>/<run>/metrics.json` folder, and a note per folder left out (not evaluated)."""
    runs, notes = [], []
    for root in roots:
        if not root.is_dir():
            raise AglError(f"--runs {root}: not a folder; give folders holding <run>/metrics.json")
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            if (folder / "metrics.json").is_file():
                runs.append(folder)
            elif (folder / "predictions.jsonl").is_file():
                notes.append(f"{folder}: predictions but no metrics.json (not evaluated): left out")
    return runs, notes


def export_runs(roots: list[Path], manifest: Path, out: Path, config: ExportConfig) -> tuple[list[Path], list[str]]:
    """Write every evaluated run under `roots` to `out/data/...`; returns the aggregate files
    and notes (runs left out)."""
    runs, notes = find_runs(roots)
    if not runs:
        raise AglError(f"no <run>/metrics.json under {', '.join(map(str, roots))}; run `dvc repro` "
                       "(or `agl evaluate`) first")
    version = content_hash(manifest)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)  # the repair is the manifest's own note
        truth = load_manifest(manifest)
    written = [export_run(folder, (truth, version), out, config) for folder in runs]
    return written, notes


def run_time(folder: Path) -> tuple[datetime, str]:
    """When the run happened: its timings file's `finished_at`, else the predictions file's
    last write (what the run itself left; never the time of the export)."""
    timings = _json(canonical.timings_path(folder / "run_summary.json"))
    stamp = timings.get("finished_at")
    if isinstance(stamp, str):
        try:
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            return when.astimezone(UTC).replace(microsecond=0), "run_summary.timings.json finished_at"
        except ValueError:
            pass
    mtime = (folder / "predictions.jsonl").stat().st_mtime
    return datetime.fromtimestamp(int(mtime), UTC), "predictions.jsonl last written"


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc if isinstance(doc, dict) else {}


def identity(doc: dict[str, Any], folder: Path, model_id: str) -> tuple[str, str]:
    """(evaluation_id, uuid) from the data version and the run's fingerprint (the SHA-256 of
    its predictions where it has none: an authors' run)."""
    fingerprint = doc.get("run_fingerprint")
    if not fingerprint:
        fingerprint = "sha256-" + content_hash(folder / "predictions.jsonl")[:16]
    version = str(doc["data_version"])
    key = f"{BENCHMARK}|{version}|{fingerprint}|{doc['run']}"
    uid = uuid.UUID(bytes=hashlib.sha256(key.encode()).digest()[:16], version=4)
    return f"{BENCHMARK}/{model_id}/{version[:12]}-{fingerprint}", str(uid)


def source_data(doc: dict[str, Any]) -> dict[str, Any]:
    details = {"data_version": str(doc["data_version"]), "clips": str(doc.get("dataset_clips")),
               "dataset_label": str(doc.get("dataset", ""))}
    if str(doc.get("dataset", "")).startswith(SYNTHETIC_MARK):
        return {"dataset_name": "AGL1K synthetic demo", "source_type": "other",
                "additional_details": {**details, "synthetic": "true"}}
    return {"dataset_name": "AGL1K", "source_type": "url", "url": [AGL1K_MANIFEST_URL],
            "additional_details": details}


def served_details(summary: dict[str, Any], asked: str) -> dict[str, str]:
    """What the provider said answered the run (its served-model ledger, run_summary.json), for
    model_info.additional_details: `served_models` ("id (share of clips)", ...),
    `served_mismatch` ("true" where any served id is not the asked one, or several answered)
    and `served_flags` (the ledger's lines). A run answered by another model is exported as
    what was asked only with this beside it. A run whose backend names no served model
    (the offline baselines) gets none of these keys."""
    served = summary.get("served_models")
    if not isinstance(served, dict) or not served:
        return {}
    flags = summary.get("served_flags")
    flags = [str(f) for f in flags] if isinstance(flags, list) else []
    mismatch = bool(flags) or len(served) > 1 or any(not same_model(asked, str(m)) for m in served)
    out = {"served_models": ", ".join(f"{m} ({float(s):.4g})" for m, s in sorted(served.items())),
           "served_mismatch": "true" if mismatch else "false"}
    if flags:
        out["served_flags"] = "; ".join(flags)
    return out


def _source_metadata(doc: dict[str, Any], info: dict[str, Any], config: ExportConfig) -> dict[str, Any]:
    published = doc.get("source") == "published"
    ours_baseline = info["developer"] == "agl"
    meta = {
        "source_name": "AGL1K leaderboard (agl)",
        # The issue's rule: the authors' released runs are documentation (their numbers,
        # re-scored here); this project's own runs are evaluation runs.
        "source_type": "documentation" if published else "evaluation_run",
        "source_organization_name": "AGL1K authors" if published else config.organization,
        "evaluator_relationship": "first_party" if ours_baseline and not published else "third_party",
        "additional_details": {"exported_by": config.organization, "agl_source": str(doc.get("source") or "agl")},
    }
    if published:
        meta["source_organization_url"] = "https://github.com/Rising0321/AGL1K"
    if doc.get("published_path"):
        meta["additional_details"]["published_path"] = str(doc["published_path"])
    return meta


def _generation(summary: dict[str, Any], timings: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """generation_config: sampling arguments the run recorded, and its cost and latency."""
    settings = summary.get("settings") or {}
    args: dict[str, Any] = {}
    if isinstance(settings.get("temperature"), int | float):
        args["temperature"] = float(settings["temperature"])
    top = settings.get("max_new_tokens") or settings.get("max_tokens") or settings.get("max_output_tokens")
    if isinstance(top, int) and top >= 1:
        args["max_tokens"] = top
    if doc.get("prompt"):
        args["prompt_template"] = f"{doc['prompt']} (sha256 {doc.get('prompt_sha256', 'unknown')})"
    extra = {k: str(doc[k]) for k in ("cost_usd", "input_tokens", "output_tokens", "price_in_per_m",
                                      "price_out_per_m", "n_refused", "n_failed", "n_truncated",
                                      "audio_tags_sent") if k in doc}
    for q, v in (timings.get("latency_s") or {}).items():
        extra[f"latency_s_{q}"] = str(v)
    if "wall_s" in timings:
        extra["wall_s"] = str(timings["wall_s"])
    return {"generation_args": args, "additional_details": extra}


def export_run(folder: Path, truth: tuple[pd.DataFrame, str], out: Path, config: ExportConfig) -> Path:
    """One run folder as an aggregate record and its instance rows; returns the record's path."""
    frame, version = truth
    doc = _json(folder / "metrics.json")
    where = folder / "metrics.json"
    if doc.get("data_version") != version:
        raise AglError(f"{where}: data_version {str(doc.get('data_version'))[:12]} is not the "
                       f"manifest's ({version[:12]}); give the --manifest the run was scored on")
    summary = _json(folder / "run_summary.json")
    timings = _json(canonical.timings_path(folder / "run_summary.json"))
    info, _ = model_info(doc, summary.get("settings") or {})
    info["additional_details"].update(served_details(summary, str(doc.get("model") or "")))
    evaluation_id, uid = identity(doc, folder, info["id"])
    when, when_from = run_time(folder)
    fallback = {"resamples": config.resamples, "seed": config.seed}
    src, generation = source_data(doc), _generation(summary, timings, doc)
    results = []
    for protocol, res in sorted(doc.get("protocols", {}).items()):
        interval = Interval.of(res, doc, fallback)
        for metric in METRICS:
            r = result(protocol, metric, res, src, interval)
            if r is not None:
                results.append({**r, "generation_config": generation})
    developer, model = datastore_dirs(info["id"])
    rel = Path("data") / (BENCHMARK if src["source_type"] == "url" else f"{BENCHMARK}-synthetic-demo") \
        / developer / model
    rows = instance_rows(folder, doc, frame, (evaluation_id, info["id"]), config.wrong_km)
    samples = out / rel / f"{uid}_samples.jsonl"
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
    for i, r in enumerate(rows):
        eee_schema.check(r, eee_schema.INSTANCE, f"{samples} row {i + 1}")
    record = {
        "schema_version": eee_schema.SCHEMA_VERSION,
        "evaluation_id": evaluation_id,
        "evaluation_timestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "retrieved_timestamp": str(int(when.timestamp())),
        "source_metadata": _source_metadata(doc, info, config),
        "model_info": info,
        "eval_library": {"name": "agl", "version": _version(),
                         "additional_details": {"timestamp_from": when_from,
                                                "protocols": ",".join(sorted(doc.get("protocols", {})))}},
        "evaluation_results": results,
        "detailed_evaluation_results": {
            "format": "jsonl", "file_path": (rel / samples.name).as_posix(), "hash_algorithm": "sha256",
            "checksum": hashlib.sha256(text.encode()).hexdigest(), "total_rows": len(rows)},
    }
    path = out / rel / f"{uid}.json"
    eee_schema.check(record, eee_schema.AGGREGATE, str(path))
    # Both whole or neither under its final name (a full disk keeps the old files), and a link
    # planted at either is replaced, never written through (agl.core.diskwrite).
    diskwrite.write_bytes(samples, text.encode())
    diskwrite.write_text(path, json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return path


def _version() -> str:
    from agl import __version__

    return __version__
