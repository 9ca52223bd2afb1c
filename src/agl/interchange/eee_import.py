"""Every Eval Ever records for AGL1K, from anyone, as runs the leaderboard ranks.

A record is checked against the EEE 0.3.0 schema and must be AGL1K's (every result's
source_data.dataset_name starts with "AGL1K", at least one metric is `agl1k.<metric>`, and a
data_version it states is the manifest's). Where its instance rows carry a place (the
extracted value holds latitude/longitude, or a status this project writes), the predictions
are scored again by this project's protocols with the record's own resample count and seed,
and any headline number that then differs from the record's is reported. Otherwise the
record's aggregate numbers are ranked as stated (source_type documentation). Either way the
run is written to `<out>/<name>/metrics.json`, named `eee/<organization>/<model>` and marked
with its source, so it stands beside this project's runs, never for one of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agl.core import canonical
from agl.core.checks import MAX_RESAMPLES, check_resamples
from agl.core.geo import EARTH_MAX_KM
from agl.core.paths import inside
from agl.dataset.manifest import ManifestWarning, content_hash, dataset_label, load_manifest
from agl.errors import AglError
from agl.interchange import eee_schema
from agl.interchange.eee_metrics import BENCHMARK, METRICS, protocols_of
from agl.predictions.records import Prediction, Status, write_predictions
from agl.scoring.clusters import parse_unit
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import evaluate_run
from agl.scoring.leaderboard_table import IMPORTED_SOURCE
from agl.scoring.protocols import PROTOCOLS

PLACE = ("latitude", "longitude", "city", "country", "continent")


@dataclass(frozen=True)
class ImportConfig:
    """The fallbacks where a record does not say (params `evaluate`)."""

    resamples: int = 1000
    seed: int = 0
    strict_refusal_km: float = EARTH_MAX_KM
    max_resamples: int = MAX_RESAMPLES  # params evaluate.max_resamples: a record asks for no more


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON has (no run states one)")


def load_json(raw: bytes, where: str) -> Any:
    """Outside JSON, strictly: UTF-8, no NaN/Infinity (Python's reader takes them), nesting no
    deeper than the parser's own limit; anything else is one line naming `where`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AglError(f"{where}: not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}); "
                       "save it as UTF-8") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise AglError(f"{where}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except ValueError as exc:  # parse_constant's refusal
        raise AglError(f"{where}: {exc}") from None
    except RecursionError:
        raise AglError(f"{where}: nested too deeply to be a record (an EEE record is a few "
                       "levels deep)") from None


def is_eee(path: Path) -> bool:
    """A folder (of records), or a JSON object with EEE's schema_version and results."""
    if path.is_dir():
        return True
    if path.suffix != ".json" or not path.is_file():
        return False
    raw = path.read_bytes()
    try:
        doc = load_json(raw, str(path))
    except AglError:  # a broken record is still a record: read_record names what is wrong
        return b'"schema_version"' in raw and b'"evaluation_results"' in raw
    return isinstance(doc, dict) and "schema_version" in doc and "evaluation_results" in doc


def record_files(src: Path) -> list[Path]:
    files = [src] if src.is_file() else sorted(p for p in src.rglob("*.json") if p.is_file())
    if not files:
        raise AglError(f"{src}: no EEE record (*.json) found")
    return files


def read_record(path: Path, version: str) -> dict[str, Any]:
    """A schema-valid AGL1K record, else one line naming the field."""
    record = load_json(path.read_bytes(), str(path))
    eee_schema.check(record, eee_schema.AGGREGATE, str(path))
    results = record["evaluation_results"]
    for i, r in enumerate(results):
        name = str(r["source_data"].get("dataset_name", ""))
        if not name.upper().startswith("AGL1K"):
            raise AglError(f"{path}: evaluation_results[{i}].source_data.dataset_name {name!r}: "
                           "not AGL1K; only AGL1K records join this leaderboard")
        stated = (r["source_data"].get("additional_details") or {}).get("data_version")
        if stated and stated != version:
            raise AglError(f"{path}: evaluation_results[{i}].source_data.additional_details."
                           f"data_version {stated[:12]} is not the manifest's ({version[:12]}); "
                           "give the --manifest the record was scored on")
    if not any(str(r["metric_config"].get("metric_id", "")).removeprefix(f"{BENCHMARK}.") in METRICS
               for r in results):
        raise AglError(f"{path}: evaluation_results[].metric_config.metric_id: none is an AGL1K "
                       f"metric ({', '.join(f'{BENCHMARK}.{m}' for m in list(METRICS)[:4])}, ...)")
    return record


def read_rows(path: Path, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's instance rows (none where it has no detailed_evaluation_results), each
    schema-valid, with the checksum and evaluation_id the record names."""
    detail = record.get("detailed_evaluation_results")
    if not detail:
        return []
    samples = path.parent / Path(detail["file_path"]).name
    if not samples.is_file():
        raise AglError(f"{path}: detailed_evaluation_results.file_path: {samples.name} is not beside "
                       "the record; copy it there, or drop the field to rank the stated numbers")
    raw = samples.read_bytes()
    if detail.get("checksum") and detail.get("hash_algorithm", "sha256") == "sha256" \
            and hashlib.sha256(raw).hexdigest() != detail["checksum"]:
        raise AglError(f"{path}: detailed_evaluation_results.checksum: {samples.name} does not match it "
                       "(changed after the record was written)")
    rows = []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise AglError(f"{samples}: row {line}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = load_json(line.encode("utf-8"), f"{samples} row {n}")
        eee_schema.check(row, eee_schema.INSTANCE, f"{samples} row {n}")
        if row["evaluation_id"] != record["evaluation_id"]:
            raise AglError(f"{samples} row {n}: evaluation_id {row['evaluation_id']!r} is not the record's")
        rows.append(row)
    return rows


def _float(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def prediction_of(row: dict[str, Any]) -> Prediction | None:
    """The prediction an instance row states (its first extracted value that is a JSON object
    with place fields), or None."""
    for a in row.get("answer_attribution") or []:
        try:
            value = json.loads(a.get("extracted_value") or "")
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict) or not any(k in value for k in (*PLACE, "status")):
            continue
        lat, lon = _float(value.get("latitude")), _float(value.get("longitude"))
        place = {k: (str(value[k]) if value.get(k) is not None else None) for k in PLACE[2:]}
        status = value.get("status")
        if status not in {s.value for s in Status}:
            status = "ok" if lat is not None and lon is not None else "unparseable"
        original = value.get("original") if isinstance(value.get("original"), dict) else None
        reply = (row.get("output") or {}).get("raw") or [None]
        return Prediction(str(row["sample_id"]), Status(status), lat, lon, **place,
                          confidence=_float(value.get("confidence")), raw_reply=reply[0],
                          refused=bool(value.get("refused", False)), original=original)
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.").lower() or "unknown"


def _bootstrap(record: dict[str, Any], config: ImportConfig, path: Path) -> tuple[int, int]:
    """The record's resample count and seed (its first interval that states them); a count
    past evaluate.max_resamples is refused before any work (a record is outside input)."""
    for i, r in enumerate(record["evaluation_results"]):
        details = r["score_details"]
        b = (details.get("uncertainty") or {}).get("num_bootstrap_samples")
        if isinstance(b, int) and not isinstance(b, bool):
            check_resamples({f"evaluation_results[{i}].score_details.uncertainty.num_bootstrap_samples":
                             (b, 0)}, config.max_resamples, str(path))
            if b < 0:
                raise AglError(f"{path}: evaluation_results[{i}].score_details.uncertainty."
                               f"num_bootstrap_samples: {b} is not a count of resamples (0 or more)")
            seed = (details.get("details") or {}).get("bootstrap_seed", config.seed)
            return b, int(seed) if str(seed).lstrip("-").isdigit() else config.seed
    return config.resamples, config.seed


def _info(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """What metrics.json says about the imported run: its model, and where it came from."""
    meta, model = record["source_metadata"], record["model_info"]
    org = str(meta["source_organization_name"])
    return {"run": f"eee/{_slug(org)}/{_slug(model['id'])}", "model": str(model["id"]),
            "backend": "eee-import", "paper_name": str(model.get("name") or ""),
            "source": f"{IMPORTED_SOURCE}{org} ({meta['source_type']}, {meta['evaluator_relationship']})",
            "eee_evaluation_id": str(record["evaluation_id"]), "eee_record": path.name}


def _folder(out: Path, run: str) -> Path:
    """The run's folder under `out`, never through a link that leads out of it."""
    folder = out / run.replace("/", "--")
    inside(out, folder, AglError)
    return folder


def run_names(records: list[tuple[Path, dict[str, Any]]], out: Path) -> dict[Path, str]:
    """Each record's run name: `eee/<organization>/<model>`, unless another record of this
    import, or an earlier import's folder, holds another evaluation of the same organization and
    model: then each such record is `eee/<organization>/<model>@<8 hex of its evaluation_id>`,
    two runs side by side, never one overwriting the other. The same evaluation_id in two
    files is refused (it would be ranked twice)."""
    seen: dict[str, Path] = {}
    by_base: dict[str, set[str]] = {}
    for path, record in records:
        ident = str(record["evaluation_id"])
        if ident in seen:
            raise AglError(f"{path}: evaluation_id {ident[:60]!r} is also {seen[ident]}'s; one "
                           "evaluation is imported once (remove one of the two files)")
        seen[ident] = path
        by_base.setdefault(_info(record, path)["run"], set()).add(ident)
    names = {}
    for path, record in records:
        base, ident = _info(record, path)["run"], str(record["evaluation_id"])
        earlier = _imported_id(out / base.replace("/", "--"))
        crowded = len(by_base[base]) > 1 or (earlier is not None and earlier != ident)
        names[path] = f"{base}@{hashlib.sha256(ident.encode()).hexdigest()[:8]}" if crowded else base
    return names


def _imported_id(folder: Path) -> str | None:
    """The evaluation_id an earlier import wrote into `folder` (None: no such import)."""
    try:
        doc = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(doc.get("eee_evaluation_id")) if isinstance(doc, dict) else None


def import_record(path: Path, truth: tuple[Any, str, Path], out: Path, config: ImportConfig,
                  run: str | None = None) -> tuple[Path, list[str]]:
    """One record as `<out>/<run>/metrics.json` (and predictions + scores where its rows carry
    places); returns the folder and notes (numbers that differ once re-scored). `run`: its
    name (run_names), by default `eee/<organization>/<model>`."""
    frame, version, _ = truth  # the manifest frame, its content hash, its path
    record = read_record(path, version)
    stated = protocols_of(record["evaluation_results"], str(path), len(frame))
    rows = read_rows(path, record)
    info = _info(record, path)
    if run is not None:
        info["run"] = run
    folder = _folder(out, info["run"])
    predictions: dict[str, Prediction] = {}
    order: dict[str, int] = {}
    for row in rows:
        if row["sample_id"] not in predictions:
            p = prediction_of(row)
            if p is not None:
                predictions[row["sample_id"]] = p
                rank = str((row.get("metadata") or {}).get("run_order", ""))
                order[row["sample_id"]] = int(rank) if rank.isdigit() else len(order) + len(rows)
    if not any(p.has_coordinates for p in predictions.values()):
        return _as_stated(folder, info, stated, frame, version), []
    unknown = sorted(set(predictions) - set(frame["key"]))
    if unknown:
        raise AglError(f"{path}: instance rows for {len(unknown)} clip(s) not in the manifest "
                       f"(e.g. sample_id {unknown[0]!r}); give the AGL1K manifest they were scored on")
    folder.mkdir(parents=True, exist_ok=True)
    # In the run's own order (metadata.run_order, else the rows'): the bootstrap resamples
    # rows in file order, so that order gives the record's own intervals back.
    ranked = sorted(predictions, key=lambda k: order[k])
    write_predictions(folder / "predictions.jsonl", [predictions[k] for k in ranked])
    resamples, seed = _bootstrap(record, config, path)
    protocols = tuple(p for p in PROTOCOLS if p in stated) or tuple(PROTOCOLS)
    # A record without intervals (0 resamples) is scored without them: a caller's option,
    # never evaluate.metric_bootstrap, which is at least 1 (agl.scoring.config).
    evaluation = EvaluateConfig(protocols=protocols, seed=seed,
                                **({"metric_bootstrap": resamples} if resamples else {"intervals": False}),
                                strict_refusal_km=config.strict_refusal_km, track=False,
                                resampling_unit=_unit(stated, path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        doc = evaluate_run(info["run"], folder / "predictions.jsonl", truth[2], folder,
                           evaluation, info={k: v for k, v in info.items() if k != "run"},
                           retry="ask the record's publisher for the missing clips")
    written = json.loads(canonical.dumps(doc["protocols"]))  # as metrics.json holds them
    return folder, _differences(stated, written, info["run"])


def _as_stated(folder: Path, info: dict[str, Any], stated: dict[str, Any], frame: Any, version: str) -> Path:
    """A record without places: its aggregate numbers, ranked as the record states them."""
    n = max((res.get("n", 0) for res in stated.values()), default=0)
    doc = {**info, "data_version": version, "dataset": dataset_label(frame), "dataset_clips": len(frame),
           "clips_predicted": n, "scored_from": "the record's stated numbers (no per-clip places)",
           "protocols": stated}
    canonical.write_json(folder / "metrics.json", doc)
    return folder


def _unit(stated: dict[str, Any], path: Path) -> str:
    """The unit the record's intervals resampled (details.resampling_unit; `clip` where it
    does not say: an interval with no unit named is the independent bootstrap)."""
    units = {str(res["resampling_unit"]) for res in stated.values() if res.get("resampling_unit")}
    if len(units) > 1:
        raise AglError(f"{path}: evaluation_results[].score_details.details.resampling_unit: "
                       f"{' and '.join(sorted(units))} in one record; give one unit per record")
    unit = units.pop() if units else "clip"
    return parse_unit(unit, f"{path}: evaluation_results[].score_details.details.resampling_unit").name


def _same(a: Any, b: Any, metric: str) -> bool:
    """A stated number and ours as metrics.json writes it (agl.core.canonical): the stated
    one rounded to the metric's precision first, so a record written at full precision
    matches, and our own export (written from metrics.json) matches exactly."""
    if not isinstance(b, int | float) or isinstance(b, bool):
        return False
    return canonical.round_value(float(a), canonical.quantity_of(metric)) == b


def _differences(stated: dict[str, Any], scored: dict[str, Any], run: str) -> list[str]:
    """Each stated number (headline value and its intervals) that the re-scoring does not
    give, at the precision metrics.json holds."""
    notes = []
    for protocol, res in stated.items():
        ours = scored.get(protocol) or {}
        for metric in METRICS:
            a, b = res.get(metric), ours.get(metric)
            if isinstance(a, int | float) and not isinstance(a, bool) and not _same(a, b, metric):
                notes.append(f"{run}: {protocol} {metric} is {b!r} re-scored here, {a!r} in the record")
            for table in ("ci95", "ci95_clip"):
                pair = (res.get(table) or {}).get(metric)
                if pair is None:
                    continue
                theirs = (ours.get(table) or {}).get(metric) or (None, None)
                if not all(_same(x, y, metric) for x, y in zip(pair, theirs, strict=True)):
                    notes.append(f"{run}: {protocol} {metric} {table} is {list(theirs)} re-scored here, "
                                 f"{list(pair)} in the record")
    return notes


def import_records(src: Path, manifest: Path, out: Path, config: ImportConfig) -> list[tuple[Path, list[str]]]:
    """Every record under `src` (a file or a folder), each checked before any is written."""
    version = content_hash(manifest)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        frame = load_manifest(manifest)
    files = [f for f in record_files(src) if not f.name.endswith("_samples.jsonl")]
    records = []
    for f in files:  # all or nothing: a bad record stops the import before any is written
        record = read_record(f, version)
        protocols_of(record["evaluation_results"], str(f), len(frame))  # its numbers, bounded
        records.append((f, record))
    names = run_names(records, out)
    return [import_record(f, (frame, version, manifest), out, config, names[f]) for f in files]
