"""The localize stage's one call: run Audio Localizability (agl.curation.localizability) on
the manifest, the tag stage's table and a reference run, write its tables and summary, and
log everything as one MLflow run keyed by the inputs' content hashes and the params."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agl.core import canonical
from agl.core.tracking import log_run
from agl.curation.localizability import ratings_frame, run_localizability
from agl.curation.localizability_judges import JUDGE_PROMPT
from agl.curation.localizability_params import LocalizabilityConfig
from agl.dataset.manifest import content_hash, load_manifest
from agl.errors import AglError
from agl.predictions.importer import import_published, is_published_file
from agl.predictions.records import read_predictions
from agl.prompts import load_prompt


@dataclass(frozen=True)
class LocalizeFiles:
    """The stage's inputs (manifest, tags.csv, the reference run's predictions) and outputs."""

    manifest: Path
    tags: Path
    reference: Path
    out_dir: Path  # weights.csv, clips.csv, ratings.csv, selected.csv
    summary: Path


def read_reference(path: Path) -> dict:
    """key -> Prediction, from our predictions.jsonl or an authors' published result file."""
    if not path.is_file():
        raise AglError(f"{path}: reference predictions not found; run the reference model first "
                       "(dvc repro infer) or set localizability.reference")
    if is_published_file(path):
        return {p.sample_id: p for p in import_published(path)}
    return read_predictions(path)


def localize(files: LocalizeFiles, params: dict[str, Any]) -> dict[str, Any]:
    """Weights, per-clip l_k and the selected clips for params.yaml `localizability:`
    (`params`); writes the tables and the summary, logs the MLflow run, returns the summary."""
    import pandas as pd  # heavy: only when the stage runs

    cfg = LocalizabilityConfig.from_params(params)
    manifest = load_manifest(files.manifest)
    try:
        tags = pd.read_csv(files.tags, dtype={"key": str})
    except FileNotFoundError:
        raise AglError(f"{files.tags}: tags not found; run the tag stage first") from None
    result = run_localizability(manifest, tags, read_reference(files.reference), cfg)
    out = files.out_dir
    out.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(result.weights.frame(), out / "weights.csv")
    canonical.write_csv(result.clips, out / "clips.csv")
    canonical.write_csv(ratings_frame(result.ratings), out / "ratings.csv")
    sel = result.clips.set_index("key").loc[result.selected, ["l_k", "has_speech"]].reset_index()
    canonical.write_csv(sel, out / "selected.csv")
    summary = {**result.summary, "reference_file": str(files.reference)}
    canonical.write_json(files.summary, summary)
    _log(files, params, summary)
    return summary


def _log(files: LocalizeFiles, params: dict[str, Any], summary: dict[str, Any]) -> str:
    hashes = {name: content_hash(p)[:12] for name, p in
              (("manifest", files.manifest), ("tags", files.tags), ("reference", files.reference))}
    check = summary["check_holdout"]
    return log_run(
        # The params are part of the key: each experiment of a γ/θ sweep is its own run.
        run_key=(f"localizability:{hashes['manifest']}:{hashes['tags']}:{hashes['reference']}:"
                 + hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode())
                 .hexdigest()[:12]),
        run_name="localizability",
        params={**params, "judge_prompt_sha256": load_prompt(JUDGE_PROMPT).sha256,
                **{f"sha256.{k}": v for k, v in hashes.items()}},
        metrics={"holdout_spearman_rho": check["spearman_rho"], "holdout_p": check["p_value"],
                 "holdout_n": check["n"], "selected": summary["selection"]["selected"],
                 "highly_localizable": summary["selection"]["highly_localizable"],
                 "clips": summary["clips"], "judge_clips_rated": summary["judges"]["clips_rated"],
                 "judge_alpha": summary["judges"]["agreement_krippendorff_alpha_interval"],
                 **{f"a.{c}": w["a"] for c, w in summary["weights"].items()},
                 **{f"a_bar.{c}": w["a_bar"] for c, w in summary["weights"].items()}},
        artifacts=[files.out_dir, files.summary],
        tags={"agl.stage": "localize"},
    )


def summary_line(summary: dict[str, Any]) -> str:
    """What the stage prints: the selection and the held-out rank check."""
    check = summary["check_holdout"]
    rho = check["spearman_rho"]
    return (f"localize: {summary['selection']['selected']} of {summary['clips']} clip(s) selected; "
            f"P={summary['P']} N={summary['N']}; held-out Spearman(l_k, error) = "
            f"{'n/a' if rho is None else f'{rho:.3f}'} (n={check['n']})")
