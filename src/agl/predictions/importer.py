"""Import the authors' published result files into this project's predictions format.

Two published shapes share one set of field names: a JSON list
(`seed_42_progress_fixed.json`) and JSON Lines (`seed_42_ABCD.jsonl`). Each row has
`question_id`, `predicted_{latitude,longitude,city,country,continent}`, `reasoning` and
`model_output` (the raw reply, empty in some files).

Without reparsing, the authors' parsed fields are kept: usable values become the
prediction's fields, and the five values are also stored verbatim in `original`, so the
`paper` protocol scores exactly what the authors scored. With `reparse=True` the prediction
comes from running this project's parser on `model_output`; rows without raw text cannot be
reparsed and are written as `unparseable` with that reason, and counted; a file without any
raw text is refused (every row would be a failure, a score of nothing).
"""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.core import diskwrite
from agl.errors import AglError
from agl.predictions.lines import not_utf8
from agl.predictions.parse import REFUSAL_VALUES, parse_reply
from agl.predictions.records import FRAME_COLUMNS, PLACE_FIELDS, Prediction, Status

PUBLISHED_FIELDS = tuple(f"predicted_{f}" for f in PLACE_FIELDS)
NO_REASONING = "No reasoning provided"  # what the authors wrote where a model gave none


@dataclass
class ImportReport:
    rows: int = 0
    statuses: Counter = field(default_factory=Counter)
    without_raw_text: int = 0
    prompts: Counter = field(default_factory=Counter)

    def line(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        extra = f"; {self.without_raw_text} row(s) had no raw reply to reparse" if self.without_raw_text else ""
        return f"imported {self.rows} row(s): {parts}{extra}"


def read_published(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a published file, JSON list or JSON Lines (detected from the content)."""
    import orjson

    path = Path(path)
    if path.is_dir():
        raise AglError(f"{path}: is a folder; pass a published .json or .jsonl file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AglError(f"{path}: published file not found") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise AglError(not_utf8(path, data, line, exc.reason, "published result file")) from None
    stripped = text.lstrip().removeprefix("\ufeff")
    if stripped.startswith("["):
        try:
            rows = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            rows = _json_or_error(path, stripped)  # the standard parser's message names the line
    else:
        _refuse_one_document(path, stripped)
        rows = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    rows.append(_json_or_error(path, line, n))
    if not isinstance(rows, list) or not rows:
        raise AglError(f"{path}: no rows; a published result file holds one object per clip")
    fields = frozenset(PUBLISHED_FIELDS)
    for n, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or "question_id" not in row:
            raise AglError(f"{path}: row {n}: no 'question_id'; is this an AGL1K result file?")
        qid = row["question_id"]
        if qid is None or isinstance(qid, bool | dict | list) or not str(qid).strip():
            raise AglError(f"{path}: row {n}: question_id is {json.dumps(qid)}; every row needs its clip key")
        if not row.keys() >= fields and not row.get("model_output"):  # the set test runs in C
            absent = [f for f in PUBLISHED_FIELDS if f not in row]
            raise AglError(f"{path}: row {n} ({row['question_id']}): missing {', '.join(absent)}")
    return rows


def _refuse_one_document(path: Path, text: str) -> None:
    """A single JSON object written over many lines (a run's metrics.json, a config) is no
    result file; read as JSON Lines its first line, `{`, was called "not valid JSON"."""
    if not text.startswith("{") or "\n" not in text.strip():
        return
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return  # JSON Lines (or broken): the line reader names the line
    if isinstance(doc, dict):
        raise AglError(f"{path}: one JSON object over {text.strip().count(chr(10)) + 1} lines, not a result "
                       "file (a JSON list of rows, or JSON Lines: one row per line); is this an "
                       "AGL1K result file?")


def _json_or_error(path: Path, text: str, line: int | None = None) -> Any:
    # Python's json accepts NaN/Infinity, which orjson refuses: keep accepting what it did.
    try:
        return json.loads(text)
    except RecursionError:  # orjson refused it for its depth too: nothing here nests deeply
        where = "" if line is None else f"line {line}: "
        raise AglError(f"{path}: {where}JSON nested too deeply; a published result file holds "
                       "flat objects, one per clip") from None
    except json.JSONDecodeError as exc:
        if line is None:
            raise AglError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        raise AglError(f"{path}: line {line}: not valid JSON ({exc.msg})") from None


def is_published_file(path: str | Path) -> bool:
    """True when the file looks like an authors' result file rather than our predictions."""
    with open(path, "rb") as fh:
        head = fh.read(4096).decode("utf-8", errors="replace")  # read_published names bad bytes
    return head.lstrip().startswith("[") or ('"question_id"' in head and '"sample_id"' not in head)


_REFUSALS = REFUSAL_VALUES | {"0", "0.0", "-1"}


def _is_refusal(value: Any) -> bool:
    return value is None or str(value).strip().lower() in _REFUSALS


def _coordinate(value: Any, limit: float) -> float | None:
    if _is_refusal(value):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if abs(x) <= limit else None


# The authors' pipeline wrote this reply where the API call failed (5 of the Gemini 3 Pro
# subset's 8 "refusals"): a failed clip, not a model that declined. The paper protocol's
# reject rate still counts it, from the authors' parsed fields (their rule); every count of
# this project's (refused, failed, the failure rate) names it a failure.
API_ERROR_REPLY = "error"


def _api_error(reply: Any) -> bool:
    return isinstance(reply, str) and reply.strip().lower() == API_ERROR_REPLY


def from_published_row(row: dict[str, Any]) -> Prediction:
    """One row, read field by field: the definition that `published_frame` vectorises (and
    that the tests hold it to, row for row)."""
    sid = str(row["question_id"])
    original = {f: row.get(f) for f in PUBLISHED_FIELDS}
    lat = _coordinate(row.get("predicted_latitude"), 90)
    lon = _coordinate(row.get("predicted_longitude"), 180)
    if lat == 0 and lon == 0:  # the authors' pipeline wrote 0,0 for "no answer"
        lat = lon = None
    text = {f: row.get(f"predicted_{f}") for f in ("city", "country", "continent")}
    values = {
        "latitude": lat,
        "longitude": lon,
        **{f: (None if _is_refusal(v) else str(v).strip()) for f, v in text.items()},
    }
    missing = tuple(f for f in PLACE_FIELDS if values[f] is None)
    refusals = [f for f in PLACE_FIELDS if _is_refusal(row.get(f"predicted_{f}"))]
    if not missing:
        status = Status.OK
    elif len(missing) == len(PLACE_FIELDS):
        status = Status.REFUSED if refusals else Status.UNPARSEABLE
    else:
        status = Status.PARTIAL
    if _api_error(row.get("model_output")):
        status = Status.FAILED
    reasoning = row.get("reasoning")
    return Prediction(
        sample_id=sid,
        status=status,
        **values,
        reasoning=None if reasoning in (None, "", NO_REASONING) else str(reasoning),
        raw_reply=row.get("model_output") or None,
        refused=bool(refusals),
        missing=missing,
        original=original,
        meta={"backend": "replay", "source": "published"},
    )


def write_imported(out: str | Path, predictions: list[Prediction]) -> None:
    """Write the imported predictions atomically; on any error nothing is left behind (no
    partial file, no stray temporary) and the message names the path."""
    import os

    out = Path(out)
    if out.is_dir() or str(out).endswith(("/", os.sep)):
        raise AglError(f"{out}: is a folder; --out takes a file name, e.g. {out / 'predictions.jsonl'}")
    text = "".join(json.dumps(p.to_json(), ensure_ascii=False) + "\n" for p in predictions)
    try:
        diskwrite.write_text(out, text)
    except OSError as exc:
        raise AglError(f"{out}: cannot write there ({exc.strerror})") from None


# --- column-wise: the same rules over whole columns ----------------------------------------
# A published file repeats few distinct values per field (country names, "Unknown", 0.0), so
# each rule runs once per distinct value (pandas.factorize) instead of once per row.


def _distinct(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Codes and distinct `str(value)`s: the per-row rules read every value through str()."""
    keys = [str(v) for v in values]
    codes, uniques = pd.factorize(np.array(keys, dtype=object))
    return codes, list(uniques)


def _refusal_and_text(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    codes, uniques = _distinct(values)
    refusal = np.array([u.strip().lower() in _REFUSALS for u in uniques], dtype=bool)
    text = np.array([None if r else u.strip() for u, r in zip(uniques, refusal, strict=True)], dtype=object)
    return refusal[codes], text[codes]


def _refusal_and_coordinate(values: list[Any], limit: float) -> tuple[np.ndarray, np.ndarray]:
    objects = np.empty(len(values), dtype=object)
    objects[:] = values
    refusal = np.zeros(len(values), dtype=bool)
    coord = np.full(len(values), np.nan)
    # Coordinates are mostly Python floats, nearly all distinct: read them as an array. For a
    # float, str() round-trips through float() and only "0.0" is a refusal word (-0.0 is not).
    floats = np.fromiter((type(v) is float for v in values), dtype=bool, count=len(values))
    if floats.any():
        x = objects[floats].astype(float)
        ref = (x == 0.0) & ~np.signbit(x)
        with np.errstate(invalid="ignore"):
            coord[floats] = np.where(~ref & (np.abs(x) <= limit), x, np.nan)
        refusal[floats] = ref
    rest = np.flatnonzero(~floats)
    if rest.size:
        others = [values[i] for i in rest]
        codes, uniques = _distinct(others)
        ref = np.array([u.strip().lower() in _REFUSALS for u in uniques], dtype=bool)
        num = np.full(len(uniques), np.nan)
        for i, u in enumerate(uniques):
            if not ref[i]:
                try:
                    x = float(u)
                except ValueError:
                    continue
                num[i] = x if abs(x) <= limit else np.nan
        part = num[codes]
        # str(True) is "True" (not a refusal, not a number) but float(True) is 1.0, as per row.
        for j, v in enumerate(others):
            if type(v) is bool:
                part[j] = float(v)
        refusal[rest] = ref[codes]
        coord[rest] = part
    return refusal, coord


def _published_columns(rows: list[dict[str, Any]], path: str | Path) -> dict[str, Any]:
    """The parsed fields of every row, as arrays (the rules of `from_published_row`)."""
    sids = np.array([str(r["question_id"]) for r in rows], dtype=object)
    dup = pd.Series(sids).duplicated()
    if dup.any():
        n = int(np.argmax(dup.to_numpy()))
        raise AglError(f"{path}: row {n + 1}: question_id {sids[n]} appears twice")
    raw = {f: [r.get(f"predicted_{f}") for r in rows] for f in PLACE_FIELDS}
    ref_lat, lat = _refusal_and_coordinate(raw["latitude"], 90)
    ref_lon, lon = _refusal_and_coordinate(raw["longitude"], 180)
    zero = (lat == 0) & (lon == 0)  # the authors' pipeline wrote 0,0 for "no answer"
    lat[zero] = lon[zero] = np.nan
    cols: dict[str, Any] = {"sample_id": sids, "latitude": lat, "longitude": lon}
    refusals = ref_lat | ref_lon
    n_missing = (~np.isfinite(lat)).astype(int) + (~np.isfinite(lon)).astype(int)
    for f in ("city", "country", "continent"):
        ref, text = _refusal_and_text(raw[f])
        cols[f] = text
        refusals |= ref
        n_missing += ref.astype(int)
    status = np.where(
        n_missing == 0, Status.OK.value,
        np.where(n_missing < len(PLACE_FIELDS), Status.PARTIAL.value,
                 np.where(refusals, Status.REFUSED.value, Status.UNPARSEABLE.value)))
    errors = np.array([_api_error(r.get("model_output")) for r in rows], dtype=bool)
    status = np.where(errors, Status.FAILED.value, status)
    cols["status"] = status.astype(object)
    cols["refused"] = refusals
    cols["original"] = [dict(zip(PUBLISHED_FIELDS, vals, strict=True))
                        for vals in zip(*(raw[f] for f in PLACE_FIELDS), strict=True)]
    return cols


@contextmanager
def _bulk_objects() -> Iterator[None]:
    """No cyclic garbage collection while a published file becomes rows and columns: its
    hundreds of thousands of dicts (none in a reference cycle) would otherwise be walked
    again at every collection while they are built, ~10% of the whole `agl evaluate`."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def published_frame(path: str | Path) -> pd.DataFrame:
    """A published file as a predictions frame (agl.predictions.records.FRAME_COLUMNS), column-wise:
    the same frame as `prediction_frame(import_published(path))`, without a Prediction per row."""
    with _bulk_objects():
        rows = read_published(path)
        cols = _published_columns(rows, path)
    frame = pd.DataFrame({c: cols[c] if c in cols else np.full(len(rows), np.nan) for c in FRAME_COLUMNS})
    frame["refused"] = frame["refused"].astype(bool)
    return frame


def import_published(path: str | Path, *, reparse: bool = False) -> list[Prediction]:
    """The published file as predictions (see `import_with_report` for the counts)."""
    return import_with_report(path, reparse=reparse)[0]


def import_with_report(
    path: str | Path, *, reparse: bool = False
) -> tuple[list[Prediction], ImportReport]:
    """A published result file as predictions, with a report of what the import saw (rows, prompts,
    refusals, re-parsed replies)."""
    rows = read_published(path)
    report = ImportReport(rows=len(rows))
    for row in rows:
        if row.get("question"):
            report.prompts[row["question"]] += 1
    if reparse:
        out = _reparsed(rows, path, report)
        if report.without_raw_text == report.rows:  # nothing to reparse: every row a failure
            raise AglError(f"{path}: none of its {report.rows} rows has a raw reply "
                           "(model_output) to reparse; run the same command without --reparse "
                           "to use the authors' parsed fields")
    else:
        out = _predictions(rows, _published_columns(rows, path))
    report.statuses.update(p.status.value for p in out)
    return out, report


def _predictions(rows: list[dict[str, Any]], cols: dict[str, Any]) -> list[Prediction]:
    """Prediction records from the column-wise fields (what `agl import` writes)."""
    meta = {"backend": "replay", "source": "published"}
    out = []
    for i, row in enumerate(rows):
        values = {
            "latitude": None if np.isnan(cols["latitude"][i]) else float(cols["latitude"][i]),
            "longitude": None if np.isnan(cols["longitude"][i]) else float(cols["longitude"][i]),
            **{f: cols[f][i] for f in ("city", "country", "continent")},
        }
        reasoning = row.get("reasoning")
        out.append(Prediction(
            sample_id=cols["sample_id"][i],
            status=Status(cols["status"][i]),
            **values,
            reasoning=None if reasoning in (None, "", NO_REASONING) else str(reasoning),
            raw_reply=row.get("model_output") or None,
            refused=bool(cols["refused"][i]),
            missing=tuple(f for f in PLACE_FIELDS if values[f] is None),
            original=cols["original"][i],
            meta=dict(meta),
        ))
    return out


def _reparsed(rows: list[dict[str, Any]], path: str | Path, report: ImportReport) -> list[Prediction]:
    seen: set[str] = set()
    out: list[Prediction] = []
    for n, row in enumerate(rows, start=1):
        sid = str(row["question_id"])
        if sid in seen:
            raise AglError(f"{path}: row {n}: question_id {sid} appears twice")
        seen.add(sid)
        raw = row.get("model_output")
        if raw:
            p = parse_reply(sid, raw, backend="replay", source="published-reparsed")
        else:
            report.without_raw_text += 1
            p = Prediction(
                sid, Status.UNPARSEABLE,
                error="the published row has no raw model_output to reparse",
                meta={"backend": "replay", "source": "published-reparsed"},
            )
        out.append(p)
    return out
