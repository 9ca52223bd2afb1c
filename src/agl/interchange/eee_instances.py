"""A run's per-clip EEE rows: one per clip and per-clip metric (distance, continent, country,
city under each protocol), each pointing at its aggregate result by evaluation_result_id.

A row carries the reply (`output.raw`), the reasoning, and the prediction this project read
from it (`answer_attribution[0].extracted_value`: a JSON object with the five place fields,
status and, for an authors' run, their verbatim fields), so `agl import` can score it again.
A clip a protocol leaves out of a metric (an untagged country, an out-of-range latitude under
the paper protocol) has no row for it: the aggregate's num_samples counts the same rows.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical
from agl.errors import AglError
from agl.interchange.eee_metrics import BENCHMARK, METRICS
from agl.interchange.eee_schema import SCHEMA_VERSION
from agl.predictions.records import Prediction, read_predictions

PER_CLIP = {m: spec[3] for m, spec in METRICS.items() if spec[3]}
PLACE = ("latitude", "longitude", "city", "country", "continent")


def reference(row: pd.Series) -> str:
    """The clip's true place as one JSON text (the same for every model: sample_hash joins)."""
    return json.dumps({k: _plain(row[k]) for k in PLACE}, sort_keys=True, ensure_ascii=False)


def _plain(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v.item() if hasattr(v, "item") else v


def extracted(p: Prediction) -> str:
    """The prediction as read from the reply: what `agl import` scores again."""
    out = {k: getattr(p, k) for k in PLACE}
    out.update(status=p.status.value, refused=p.refused, confidence=p.confidence)
    if p.original is not None:
        out["original"] = p.original
    return json.dumps(out, sort_keys=True, ensure_ascii=False)


def _scores(folder: Path, protocol: str) -> pd.DataFrame:
    path = folder / f"scores_{protocol}.csv"
    if not path.is_file():
        raise AglError(f"{path}: missing (metrics.json lists the {protocol} protocol); re-run the evaluate stage")
    frame = pd.read_csv(path, dtype={"sample_id": str}, usecols=["sample_id", *PER_CLIP.values()])
    return frame.set_index("sample_id")


def _usage(p: Prediction, latency: Any) -> dict[str, Any]:
    """token_usage and performance, where the run recorded them."""
    out: dict[str, Any] = {}
    i, o = p.meta.get("input_tokens"), p.meta.get("output_tokens")
    if isinstance(i, int) and isinstance(o, int) and i >= 0 and o >= 0 and (i or o):
        out["token_usage"] = {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}
    if isinstance(latency, int | float) and latency >= 0:
        out["performance"] = {"latency_ms": round(float(latency) * 1000.0, 3)}
    return out


def _base(p: Prediction, truth: pd.Series, ids: tuple[str, str], latency: Any) -> dict[str, Any]:
    raw = f"audio clip {truth['key']}/{truth['mp3name']}: where was it recorded?"
    ref = reference(truth)
    meta = {"status": p.status.value, "refused": str(p.refused).lower()}
    if isinstance(p.meta.get("cost_usd"), int | float):
        meta["cost_usd"] = str(p.meta["cost_usd"])
    row = {
        "schema_version": SCHEMA_VERSION, "evaluation_id": ids[0], "model_id": ids[1],
        "sample_id": p.sample_id, "sample_hash": hashlib.sha256((raw + ref).encode()).hexdigest(),
        "interaction_type": "single_turn", "input": {"raw": raw, "reference": [ref]},
        "output": {"raw": [p.raw_reply or ""],
                   **({"reasoning_trace": [p.reasoning]} if p.reasoning else {})},
        "answer_attribution": [{"turn_idx": 0, "source": "output.raw", "extracted_value": extracted(p),
                                "extraction_method": "agl.predictions (published fields)"
                                if p.original is not None else "agl.predictions.parse",
                                "is_terminal": True}],
        "error": None if p.status.value == "ok" else (p.error or p.status.value),
        "metadata": meta,
    }
    return {**row, **_usage(p, latency)}


def instance_rows(folder: Path, doc: dict[str, Any], manifest: pd.DataFrame, ids: tuple[str, str],
                  wrong_km: float) -> list[dict[str, Any]]:
    """Every row of one run, ordered by result, then clips in the predictions file's order
    (stable; and the order the bootstrap draws rows in, so an import re-scores identically)."""
    preds = read_predictions(folder / "predictions.jsonl")
    truth = manifest.set_index("key", drop=False)
    timings = canonical.timings_path(folder / "run_summary.json")
    clips = json.loads(timings.read_text(encoding="utf-8")).get("clips", {}) if timings.is_file() else {}
    bases = {sid: _base(p, truth.loc[sid], ids, (clips.get(sid) or {}).get("latency_s"))
             for sid, p in preds.items() if sid in truth.index}
    for i, base in enumerate(bases.values()):  # the clip's place in the run: see agl import
        base["metadata"]["run_order"] = str(i)
    rows = []
    for protocol in sorted(doc.get("protocols", {})):
        scores = _scores(folder, protocol)
        for metric, column in PER_CLIP.items():
            values = scores[column]
            for sid in bases:  # the run's own order: a re-scoring resamples the same rows
                v = values.get(sid)
                if v is None or not math.isfinite(float(v)):
                    continue  # left out of this metric by the protocol: no row, as in its n
                v = float(v)
                ok = v <= wrong_km if metric == "distance_error_km" else v == 1.0
                rows.append({**bases[sid], "evaluation_name": f"{BENCHMARK}/{protocol}/{metric}",
                             "evaluation_result_id": f"{protocol}.{metric}",
                             "evaluation": {"score": v, "is_correct": bool(ok)},
                             "metadata": {**bases[sid]["metadata"], "protocol": protocol}})
    return rows
