"""Evaluate a run: predictions + manifest -> per-clip scores and headline metrics."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from agl.errors import AglError
from agl.geo import EARTH_MAX_KM
from agl.manifest import load_manifest
from agl.metrics import summarize
from agl.predictions import Prediction, prediction_frame
from agl.protocols import PROTOCOLS


def load_predictions_any(path: str | Path, *, reparse: bool = False) -> pd.DataFrame:
    """A predictions frame from this project's JSONL or an authors' published file."""
    from agl.importer import import_published, is_published_file

    path = Path(path)
    if not path.exists():
        raise AglError(f"{path}: predictions file not found")
    if is_published_file(path):
        return prediction_frame(import_published(path, reparse=reparse))
    return prediction_frame(path)


def score_run(
    manifest: pd.DataFrame,
    predictions: pd.DataFrame | dict[str, Prediction] | list[Prediction],
    protocol: str = "paper",
    *,
    strict_refusal_km: float = EARTH_MAX_KM,
) -> pd.DataFrame:
    """One row per scored clip under `protocol` (columns: agl.protocols.SCORE_COLUMNS)."""
    return score_with_notes(manifest, predictions, protocol, strict_refusal_km=strict_refusal_km)[0]


def score_with_notes(manifest, predictions, protocol="paper", *, strict_refusal_km=EARTH_MAX_KM):
    if protocol not in PROTOCOLS:
        raise AglError(f"unknown protocol '{protocol}'; choose one of {', '.join(PROTOCOLS)}")
    frame = predictions if isinstance(predictions, pd.DataFrame) else prediction_frame(predictions)
    if protocol == "strict":
        return PROTOCOLS[protocol](manifest, frame, strict_refusal_km=strict_refusal_km)
    return PROTOCOLS[protocol](manifest, frame)


def evaluate_frames(
    manifest: pd.DataFrame,
    predictions: pd.DataFrame,
    protocol: str = "paper",
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    strict_refusal_km: float = EARTH_MAX_KM,
) -> tuple[dict[str, Any], pd.DataFrame]:
    scored, notes = score_with_notes(
        manifest, predictions, protocol, strict_refusal_km=strict_refusal_km
    )
    if scored.empty:
        raise AglError("no prediction matches a clip of the manifest; nothing to evaluate")
    result = summarize(scored, bootstrap=bootstrap, seed=seed)
    result["by_speech"] = {
        name: summarize(scored[mask], bootstrap=bootstrap, seed=seed)
        for name, mask in (("speech", scored["has_speech"]), ("non_speech", ~scored["has_speech"]))
        if mask.any()
    }
    result["by_speech"] = {k: v for k, v in result["by_speech"].items()}
    result["notes"] = notes
    return result, scored


def evaluate_files(
    predictions_path: str | Path,
    manifest_path: str | Path,
    protocol: str = "paper",
    **opts: Any,
) -> tuple[dict[str, Any], pd.DataFrame]:
    from agl.manifest import ManifestWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ManifestWarning)
        manifest = load_manifest(manifest_path)
    reparse = opts.pop("reparse", False)
    preds = load_predictions_any(predictions_path, reparse=reparse)
    result, scored = evaluate_frames(manifest, preds, protocol, **opts)
    result["warnings"] = [str(w.message) for w in caught]
    return result, scored
