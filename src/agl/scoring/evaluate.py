"""Evaluate a run: predictions + manifest -> per-clip scores and headline metrics."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.core import canonical
from agl.core.checks import check_value
from agl.core.geo import EARTH_MAX_KM
from agl.core.headline import RANK_METRIC, run_metric_keys
from agl.core.tracking import log_run, save_runs_view
from agl.dataset.dates import after
from agl.dataset.manifest import ManifestWarning, content_hash, dataset_label
from agl.dataset.manifest_cache import load_manifest_cached
from agl.errors import AglError
from agl.predictions.authors import raw_replies, with_authors_view
from agl.predictions.importer import import_with_report, is_published_file, published_frame
from agl.predictions.records import Prediction, TornLineWarning, prediction_frame
from agl.scoring.clusters import DEFAULT_UNIT, cluster_labels, parse_unit, subset
from agl.scoring.config import EvaluateConfig
from agl.scoring.coverage import Coverage, check_run_summary, torn_error
from agl.scoring.evaluate_mlflow import run_metrics, served_tags
from agl.scoring.labels import MANIFEST_LABELS, Labelling, point_columns, point_summary, relabel
from agl.scoring.metrics import SUMMARY_COLUMNS, summarize_later
from agl.scoring.protocol_paper import PAPER_REFUSAL_KM
from agl.scoring.protocols import PROTOCOLS
from agl.scoring.repeats import stability


def load_predictions_any(path: str | Path, *, reparse: bool = False) -> pd.DataFrame:
    """A predictions frame from this project's JSONL or an authors' published file.

    Refused (one line): a file whose last line is cut off, a run's file shorter than its
    run_summary.json, a re-parse of a file without raw replies (agl.scoring.coverage)."""

    path = Path(path)
    if not path.exists():
        raise AglError(f"{path}: predictions file not found")
    if path.is_dir():
        raise AglError(f"{path}: is a folder; give the predictions file (predictions.jsonl)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", TornLineWarning)  # scoring never skips a cut line
            if is_published_file(path):
                if not reparse:  # column-wise: no Prediction object per row
                    return published_frame(path)
                reparsed = _reparsed(path)
                # paper: the authors' parser on the raw replies; strict: this project's
                return with_authors_view(prediction_frame(reparsed),
                                         {p.sample_id: p.raw_reply for p in reparsed if p.raw_reply})
            if reparse:  # never ignored: the numbers would pass for a re-parse
                raise AglError(f"{path}: --reparse re-reads the raw replies of an authors' "
                               "published file; this is a predictions file of this project "
                               "(parsed when it was made): run the same command without --reparse")
            frame = prediction_frame(path)
            # A run of this project: under `paper` its replies are read by the authors' parser.
            frame = with_authors_view(frame, raw_replies(path))
    except TornLineWarning as torn:
        raise torn_error(torn) from None
    except UnicodeDecodeError as exc:  # a binary or non-UTF-8 file, whichever reader saw it
        raise AglError(f"{path}: not UTF-8 text at byte {exc.start} ({exc.reason}); give a "
                       "predictions JSONL or a published results file") from None
    if frame.empty:  # else "no prediction matches a clip of the manifest", as if keys differed
        raise AglError(f"{path}: holds no prediction record; give a run's predictions.jsonl "
                       "(one record per clip) or an authors' published file")
    check_run_summary(path, frame)
    return frame


def _reparsed(path: Path):
    """The published file re-parsed from its raw replies; rows without one are counted in a
    warning (they are scored as unparseable: the authors' empty replies)."""

    predictions, report = import_with_report(path, reparse=True)
    if report.without_raw_text:
        warnings.warn(f"{path}: {report.without_raw_text} of {report.rows} row(s) have no raw "
                      "model_output to reparse: scored as unparseable (failures)", stacklevel=3)
    return predictions


def score_run(
    manifest: pd.DataFrame,
    predictions: pd.DataFrame | dict[str, Prediction] | list[Prediction],
    protocol: str = "paper",
    *,
    strict_refusal_km: float = EARTH_MAX_KM,
) -> pd.DataFrame:
    """One row per scored clip under `protocol` (columns: agl.scoring.score_table.SCORE_COLUMNS)."""
    return score_with_notes(manifest, predictions, protocol, strict_refusal_km=strict_refusal_km)[0]


def score_with_notes(
    manifest: pd.DataFrame,
    predictions: pd.DataFrame | dict[str, Prediction] | list[Prediction],
    protocol: str = "paper",
    *,
    strict_refusal_km: float = EARTH_MAX_KM,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The score table and the protocol's notes (rows it dropped, clips without predictions)."""
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
    bootstrap: int,
    seed: int = 0,
    strict_refusal_km: float = EARTH_MAX_KM,
    unit: str = DEFAULT_UNIT,
    labelling: Labelling = MANIFEST_LABELS,
    **summary: Any,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Score predictions (a frame of agl.predictions.records.FRAME_COLUMNS) against a manifest
    frame under one protocol: metrics with bootstrap CIs and the per-clip score table.


    `unit` (agl.scoring.clusters): what the intervals resample; `ci95` is that unit's, and
    for any unit but `clip` the clip interval stands beside it as `ci95_clip`. `labelling`
    (agl.scoring.labels): the true country from the manifest or the recording place; either
    way the result holds both accuracies and the levels from the predicted point. `summary`:
    `geoscore_km` and `influence_share` (agl.scoring.metrics.summarize_later)."""
    check_resampling(bootstrap, seed)
    parsed = parse_unit(unit)
    scored, notes = score_with_notes(
        manifest, predictions, protocol, strict_refusal_km=strict_refusal_km
    )
    if scored.empty:
        raise AglError("no prediction matches a clip of the manifest; nothing to evaluate")
    by_point = point_columns(scored, predictions, land=labelling.land, coast_km=labelling.coast_km)
    if labelling.labels == "point":
        scored = relabel(scored, by_point, predictions)
    # Clusters over every scored clip (a `site` chain may cross the speech split), then split.
    labels = None if parsed.kind == "clip" and not parsed.links else cluster_labels(scored, parsed)
    # The three summaries' bootstrap draws run at once (threads, for large tables).
    whole = summarize_later(scored, bootstrap=bootstrap, seed=seed, clusters=labels, **summary)
    speech = scored["has_speech"].to_numpy(dtype=bool)
    parts = {
        name: summarize_later(_rows(scored, mask, SUMMARY_COLUMNS), bootstrap=bootstrap, seed=seed,
                              clusters=subset(labels, mask), **summary)
        for name, mask in (("speech", speech), ("non_speech", ~speech))
        if mask.any()
    }
    result = whole()
    point = point_summary(by_point, labelling.labels, bootstrap=bootstrap, seed=seed, clusters=labels)
    result["ci95"].update(point.pop("ci95"))
    result.update(point)
    result["resampling_unit"] = parsed.name
    # how the intervals were drawn, with them: an export names it (agl.interchange.eee_metrics)
    result["interval"] = {"resamples": int(bootstrap), "seed": int(seed)}
    result["by_speech"] = {name: part() for name, part in parts.items()}
    # A median at the protocol's refusal distance is a refusal, not a distance: said so.
    refusal_km = PAPER_REFUSAL_KM if protocol == "paper" else strict_refusal_km
    for res in (result, *result["by_speech"].values()):
        res["median_refused"] = bool(res.get("median_km") == refusal_km)
    result["notes"] = notes
    return result, scored


def post_cutoff(manifest: pd.DataFrame, scored: pd.DataFrame, cutoff: str, config: EvaluateConfig,
                unit: Any) -> dict[str, Any]:
    """A model's training cutoff (ISO date) against a manifest holding `upload_date`
    (agl.dataset.dates): the metrics on the scored clips uploaded after it, clusters under the
    run's unit (over every scored clip, then the subset: as the speech split), with the counts
    of clips on or before it and of clips without a known upload date (docs/baselines.md#dates)."""
    unit = parse_unit(unit)
    labels = None if unit.kind == "clip" and not unit.links else cluster_labels(scored, unit)
    bootstrap, seed = config.resamples, config.seed

    uploaded = dict(zip(manifest["key"].astype(str), manifest["upload_date"], strict=True))
    state = after([uploaded.get(str(k), "") for k in scored["sample_id"]], cutoff)
    mask = np.array([s is True for s in state], dtype=bool)
    out: dict[str, Any] = {"cutoff": cutoff, "n_before": sum(s is False for s in state),
                           "n_undated": sum(s is None for s in state)}
    if mask.any():
        out.update(summarize_later(_rows(scored, mask, SUMMARY_COLUMNS), bootstrap=bootstrap,
                                   seed=seed, clusters=subset(labels, mask),
                                   geoscore_km=config.geoscore_km,
                                   influence_share=config.influence_share)())
    else:
        out["n"] = 0
    return out


def check_resampling(bootstrap: int, seed: int) -> None:
    """A negative resample count would give every interval as null, a negative seed a numpy
    traceback: callers name the key (agl.core.checks); this is the library's own guard."""
    check_value("bootstrap", bootstrap, "evaluate", rule="count0")
    check_value("seed", seed, "evaluate", rule="seed")


def _rows(frame: pd.DataFrame, mask, columns) -> pd.DataFrame:
    """Some rows of some columns, copied once: `frame[mask]` would copy every column (text
    ones included) and consolidate them."""
    return pd.DataFrame({c: frame[c].to_numpy()[mask] for c in columns}, copy=False)


def evaluate_files(
    predictions_path: str | Path,
    manifest_path: str | Path,
    protocol: str = "paper",
    **opts: Any,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Score a predictions file against a manifest under one protocol; returns the result and
    the per-clip score table. The result carries `clips_predicted` and `dataset_clips` (the
    coverage, n / N) and `warnings`: every warning the inputs gave (a repaired manifest, rows
    without raw text, conflicting records) and the counted ones of agl.scoring.coverage (part
    of the manifest, failed clips), for the caller to print."""

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)  # the inputs' own warnings, each shown
        manifest = load_manifest_cached(manifest_path, columns=[])
        reparse = opts.pop("reparse", False)
        preds = load_predictions_any(predictions_path, reparse=reparse)
    cover = Coverage.of(manifest, preds)
    cover.refuse_without_answers(str(predictions_path))
    result, scored = evaluate_frames(manifest, preds, protocol, **opts)
    result["clips_predicted"], result["dataset_clips"] = cover.predicted, cover.clips
    result["warnings"] = ([str(w.message) for w in caught if issubclass(w.category, UserWarning)]
                          + cover.warnings(str(predictions_path)))
    return result, scored


def evaluate_run(
    run: str,
    predictions_path: str | Path,
    manifest_path: str | Path,
    out_dir: str | Path,
    config: EvaluateConfig,
    *,
    info: dict[str, Any] | None = None,
    retry: str = "rerun the inference to retry them",
    links: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    """Score one run under each protocol, write metrics.json + scores, log one MLflow run.

    `links`: pairs of clips that are one recording (the duplicates audit's table): joined into
    one cluster under the resampling unit, whatever it is.

    `info` carries what is known about the run (model, backend, source, paper_name,
    prompt_hash, ...); a `run_summary.json` beside the predictions (written by inference)
    adds its totals: tokens, cost, latency. A run covering part of the dataset, or with
    failed clips, is scored with a counted warning (`retry`: how to retry the failures).
    """

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data_version = content_hash(manifest_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        manifest = load_manifest_cached(manifest_path, columns=["title", "upload_date"],
                                        digest=data_version)
    preds = load_predictions_any(predictions_path)
    summary_path, run_summary, info = _run_context(Path(predictions_path), info)
    # Coverage: clips of the dataset that have a prediction record, of all its clips, so the
    # leaderboard can tell a subset run from a full one.
    cover = Coverage.of(manifest, preds)
    cover.refuse_without_answers(f"{run} ({predictions_path})")
    for line in cover.warnings(f"{run} ({predictions_path})", retry=retry):
        warnings.warn(line, stacklevel=2)
    doc: dict[str, Any] = {"run": run, **info, "data_version": data_version,
                           "dataset": dataset_label(manifest), "dataset_clips": cover.clips,
                           "clips_predicted": cover.predicted, "protocols": {}}
    artifacts = [Path(predictions_path)]
    repeats = _repeat_predictions(Path(predictions_path))
    unit = replace(parse_unit(config.resampling_unit), links=tuple(links)) if links else config.resampling_unit
    for protocol in config.protocols:
        result, scored = evaluate_frames(manifest, preds, protocol, bootstrap=config.resamples,
                                         seed=config.seed, strict_refusal_km=config.strict_refusal_km,
                                         unit=unit, labelling=config.labelling,
                                         geoscore_km=config.geoscore_km,
                                         influence_share=config.influence_share)
        if info.get("training_cutoff") and "upload_date" in manifest:
            result["post_cutoff"] = post_cutoff(manifest, scored, info["training_cutoff"], config, unit)
        if repeats:  # infer.repeats > 1: how stable the answers are over the repeats
            tables = [scored] + [score_with_notes(manifest, r, protocol,
                                                  strict_refusal_km=config.strict_refusal_km)[0]
                                 for r in repeats]
            result = {**result, "repeats": stability(tables)}
        doc["protocols"][protocol] = result
        scores_path = out_dir / f"scores_{protocol}.csv"
        canonical.write_csv(scored, scores_path)
        artifacts.append(scores_path)
    canonical.write_json(out_dir / "metrics.json", doc)
    artifacts.append(out_dir / "metrics.json")
    run_summary = _with_timings(summary_path, run_summary, artifacts)
    if config.track:
        # The values as metrics.json holds them (rounded): what the track stage logs from it.
        written = json.loads(canonical.dumps(doc))
        doc["mlflow_run_id"] = _log_evaluation(written, config, info, run_summary, artifacts,
                                               (manifest, manifest_path))
        doc["mlflow_url"] = save_view(config)
    return doc


def save_view(config: EvaluateConfig, *, ranked: bool = False) -> str:
    """The experiment's runs table, opening on the headline metrics: its URL. `ranked` (the
    track stage logged the leaderboard's ranks): sorted by that rank, as the leaderboard
    orders runs, an unranked run last; else smallest error first (`agl evaluate` alone)."""
    columns = run_metric_keys(config.protocols)
    if ranked:
        return save_runs_view([RANK_METRIC, *columns], sort_by=RANK_METRIC, experiment=config.experiment)
    return save_runs_view(columns, sort_by=columns[0], experiment=config.experiment)


def track_evaluated(run_dir: str | Path, manifest_path: str | Path, config: EvaluateConfig,
                    info: dict[str, Any] | None = None, rank: int | None = None) -> str:
    """Log a run the evaluate stage scored (its folder: predictions.jsonl, metrics.json and the
    scores, as `evaluate_run` wrote them) as `evaluate_run` would have: the same run key,
    params, metrics, tags and artifacts, read back from the files (the track stage's call).
    Returns the run's key (its `agl.run_key` tag: names and data version, never a run id)."""
    run_dir = Path(run_dir)
    doc = json.loads((run_dir / "metrics.json").read_text())
    predictions = run_dir / "predictions.jsonl"
    summary_path, run_summary, info = _run_context(predictions, info)
    artifacts = [predictions] + [run_dir / f"scores_{p}.csv" for p in doc["protocols"]] + [run_dir / "metrics.json"]
    run_summary = _with_timings(summary_path, run_summary, artifacts)
    version = content_hash(manifest_path)
    if version != doc.get("data_version"):  # logged under the wrong data version otherwise
        raise AglError(f"{run_dir / 'metrics.json'}: scored on another manifest than {manifest_path}; "
                       f"`dvc repro evaluate@{doc.get('run', run_dir.name)}` scores it again")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        manifest = load_manifest_cached(manifest_path, columns=["title"], digest=version)
    extra = {} if rank is None else {RANK_METRIC: rank}  # the leaderboard's, for the runs table
    _log_evaluation(doc, config, info, run_summary, artifacts, (manifest, manifest_path), extra)
    return run_key(doc)


def run_key(doc: dict[str, Any]) -> str:
    """A scored run's MLflow key: its name and data version (re-logging updates that run)."""
    return f"{doc['run']}@{doc['data_version'][:16]}"


def _repeat_predictions(predictions_path: Path) -> list[Any]:
    """The predictions of each repeat beside the run (<run>/repeats/<k>/predictions.jsonl,
    in repeat order; agl.inference.params_run.REPEATS), [] for a run asked once."""
    folder = predictions_path.parent / "repeats"
    if not folder.is_dir():
        return []
    found = sorted((int(d.name), d / predictions_path.name) for d in folder.iterdir()
                   if d.is_dir() and d.name.isdigit() and (d / predictions_path.name).is_file())
    return [load_predictions_any(path) for _, path in found]


def _run_context(predictions_path: Path, info: dict[str, Any] | None) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The inference run's summary beside its predictions (path, and its contents or {}), and
    `info` over the summary's plain values: what both logging paths know about the run."""
    summary_path = predictions_path.with_name("run_summary.json")
    run_summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return summary_path, run_summary, {**{k: v for k, v in run_summary.items() if isinstance(v, str | int | float)},
                                       **(info or {})}


def _with_timings(summary_path: Path, run_summary: dict[str, Any], artifacts: list[Path]) -> dict[str, Any]:
    """The run's summary and timings files join the artifacts; the timings (latency, wall
    time, cache hits: not in the tracked summary, but worth logging) join the summary."""
    if summary_path.exists():
        artifacts.append(summary_path)
    timings_path = canonical.timings_path(summary_path)
    if timings_path.exists():
        artifacts.append(timings_path)
        timings = json.loads(timings_path.read_text())
        run_summary = {**run_summary, **{k: v for k, v in timings.items() if k != "clips"}}
    return run_summary


def _log_evaluation(doc: dict[str, Any], config: EvaluateConfig, info: dict[str, Any],
                    run_summary: dict[str, Any], artifacts: list[Path],
                    data: tuple[pd.DataFrame, str | Path], extra: dict[str, Any] | None = None) -> str:
    """One MLflow run for the scored run, keyed by its name and data version."""
    run = doc["run"]
    manifest, manifest_path = data
    params = {"run": run, "protocols": ",".join(config.protocols), "bootstrap": config.resamples,
              "seed": config.seed, "strict_refusal_km": config.strict_refusal_km,
              "resampling_unit": config.resampling_unit, "labels": config.labels,
              "point_land": str(config.point_land), "point_coast_km": config.point_coast_km,
              **{k: v for k, v in info.items() if k not in ("run",)}}
    return log_run(
        run_key=run_key(doc),
        run_name=run,
        params=params,
        metrics={**run_metrics(doc, run_summary), **(extra or {})},
        artifacts=artifacts,
        experiment=config.experiment,
        tags={"data_version": doc["data_version"], "dataset": doc["dataset"],
              "model": str(info.get("model", run)),
              "backend": str(info.get("backend", "")),
              "prompt_hash": str(info.get("prompt_sha256") or info.get("prompt_hash") or ""),
              "prompt": str(info.get("prompt", "")),
              "run_protocol": str(info.get("run_protocol", "")), **served_tags(run_summary)},
        dataset={"name": doc["dataset"], "digest": doc["data_version"],
                 "source": Path(manifest_path).resolve().as_uri(),
                 "frame": manifest[[c for c in ("key", "latitude", "longitude", "country",
                                                "continent") if c in manifest]]},
    )
