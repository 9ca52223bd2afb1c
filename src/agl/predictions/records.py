"""The predictions format: one JSON Lines file per model run, one object per clip.

A failure and a refusal are statuses, never values: a prediction that has no coordinate
carries `latitude: null`, never 0,0. Each record is appended, flushed and fsync'd as soon as
it exists, so an interrupted run loses at most the line being written; the reader ignores a
torn last line and keeps the newest record per clip, so a rerun that retries a failure wins.

Record fields:
  sample_id       the manifest key
  status          ok | partial | refused | unparseable | failed
  latitude, longitude, city, country, continent, confidence   (null where not given)
  reasoning, raw_reply
  refused         the model declined (in words, or by "Unknown" fields)
  error           why the call or the parse failed (null when it did not)
  missing         the fields the reply did not give usably (for status partial)
  original        for imported files: the authors' five predicted fields verbatim, so the
                  `paper` protocol scores them exactly as the authors did
  meta            backend, model, latency_s, input_tokens, output_tokens, cost_usd, ...
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from agl.core import diskwrite
from agl.core.diskwrite import disk_error
from agl.core.jsonutil import jsonable
from agl.core.paths import inside
from agl.errors import AglError
from agl.predictions.lines import BOM, not_utf8, object_lines, record_problem, utf8_problem

PLACE_FIELDS = ("latitude", "longitude", "city", "country", "continent")


class TornLineWarning(UserWarning):
    """A last line without its newline that is not a record: a killed writer's, or a copy cut
    short. Resuming a run ignores it (the writer trims it); scoring refuses the file
    (agl.scoring.coverage)."""

    def __init__(self, path: str | Path, line: int):
        super().__init__(f"{path}: ignored a torn last line (line {line}: interrupted write)")
        self.path, self.line = str(path), line


class Status(StrEnum):
    """How a prediction ended: a failure is a status, never a value (no 0,0 for an unanswered
    clip)."""
    OK = "ok"  # every place field parsed
    PARTIAL = "partial"  # some fields parsed; `missing` names the rest
    REFUSED = "refused"  # the model declined to answer
    UNPARSEABLE = "unparseable"  # a reply came back but no prediction could be read from it
    FAILED = "failed"  # no reply: the call failed (network, quota, timeout, server error)
    # The reply was cut at the output limit (finish_reason length / MAX_TOKENS): whatever
    # fields its text holds are kept; the strict protocol counts it a failure, the paper's
    # scores what the authors' parser would have read from it (docs/metrics.md).
    TRUNCATED = "truncated"


@dataclass(frozen=True)
class Prediction:
    """One clip's prediction: the place fields (None where missing), a status, the raw reply, and
    meta (backend, tokens, cost, run fingerprint)."""
    sample_id: str
    status: Status
    latitude: float | None = None
    longitude: float | None = None
    city: str | None = None
    country: str | None = None
    continent: str | None = None
    confidence: float | None = None
    reasoning: str | None = None
    raw_reply: str | None = None
    refused: bool = False
    error: str | None = None
    missing: tuple[str, ...] = ()
    original: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_coordinates(self) -> bool:
        return self.latitude is not None and self.longitude is not None

    @property
    def finished(self) -> bool:
        """A finished clip is not requested again on resume; a failed one is retried."""
        return self.status is not Status.FAILED

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["missing"] = list(self.missing)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Prediction:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        sid = d["sample_id"]
        if isinstance(sid, bool) or not isinstance(sid, str | int):
            raise TypeError(f"sample_id must be text, got {type(sid).__name__}")
        kw["sample_id"] = str(sid)
        kw["status"] = Status(d["status"])
        kw["missing"] = tuple(d.get("missing") or ())
        kw["meta"] = dict(d.get("meta") or {})
        return without_non_finite(cls(**kw))

    def with_meta(self, **meta: Any) -> Prediction:
        return replace(self, meta={**self.meta, **meta})


def without_non_finite(pred: Prediction) -> Prediction:
    """NaN and infinite numbers are missing values, never numbers: a reply with
    `"latitude": NaN` has no latitude (listed in `missing`), and an `ok` record that loses a
    place field becomes `partial` (or `unparseable` when none is left)."""
    lost = [f for f in ("latitude", "longitude", "confidence")
            if isinstance(getattr(pred, f), float) and not math.isfinite(getattr(pred, f))]
    if not lost:
        return pred
    changes: dict[str, Any] = {f: None for f in lost}
    place_lost = [f for f in lost if f in PLACE_FIELDS]
    if place_lost:
        # A coordinate pair is one value: half of it is no position.
        pair = {"latitude", "longitude"}
        changes.update({f: None for f in pair})
        missing = tuple(dict.fromkeys([*pred.missing, *sorted(pair)]))
        changes["missing"] = missing
        if pred.status in (Status.OK, Status.PARTIAL):
            left = [f for f in PLACE_FIELDS if f not in missing and getattr(pred, f) is not None]
            changes["status"] = Status.PARTIAL if left else Status.UNPARSEABLE
    return replace(pred, **changes)


def failed(sample_id: str, error: str, **meta: Any) -> Prediction:
    return Prediction(sample_id=sample_id, status=Status.FAILED, error=error, meta=meta)


def _line(prediction: Prediction) -> str:
    """One record as a JSON line; a non-finite number anywhere is written as null, so the
    file is always valid JSON (allow_nan=False)."""

    d = without_non_finite(prediction).to_json()
    return json.dumps(jsonable(d), ensure_ascii=False, allow_nan=False) + "\n"


class PredictionWriter:
    """Appends records durably: each line is flushed and fsync'd before `write` returns."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        inside(self.path.parent, self.path)  # appends never go through a link out of the run folder
        _drop_torn_tail(self.path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise disk_error(exc, self.path) or exc from None

    def write(self, prediction: Prediction) -> None:
        self._append(_line(prediction).encode("utf-8"))

    def write_many(self, predictions: Iterable[Prediction]) -> None:
        """Group commit: append several records with one fsync (all durable on return).
        Lets a fast run write at the request rate instead of the disk's fsync rate."""
        self._append("".join(_line(p) for p in predictions).encode("utf-8"))

    def _append(self, data: bytes) -> None:
        """All of `data` and an fsync, or nothing: a failed append (a full disk) is cut back
        to the last whole record, so the run stays resumable, and is one line (DiskError)."""
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise disk_error(exc, self.path) or exc from None

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> PredictionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line that a killed writer left without its newline, so appends stay valid."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        data = path.read_bytes()
        fh.truncate(data.rfind(b"\n") + 1)


def iter_records(path: str | Path) -> Iterator[Prediction]:
    """The predictions of a JSON Lines file in file order; one line naming the file and line for
    anything that is not a record."""
    path = Path(path)
    try:
        raw = path.read_bytes().removeprefix(BOM)
    except FileNotFoundError:
        raise AglError(f"{path}: predictions file not found") from None
    except IsADirectoryError:
        raise AglError(f"{path}: is a folder; give the predictions file") from None
    bad = utf8_problem(raw)
    if bad:
        raise AglError(not_utf8(path, raw, *bad, "predictions file"))
    lines = raw.decode("utf-8").splitlines(keepends=True)
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            problem = record_problem(record)
            if problem:
                raise TypeError(problem)
            yield Prediction.from_json(record)
        except (json.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError,
                RecursionError) as exc:
            if n == len(lines) and not line.endswith("\n"):
                warnings.warn(TornLineWarning(path, n), stacklevel=2)
                return
            raise AglError(f"{path}: line {n}: not a prediction record ({exc})") from None


def read_predictions(path: str | Path) -> dict[str, Prediction]:
    """The newest record per clip, in first-seen order."""
    latest: dict[str, Prediction] = {}
    for p in iter_records(path):
        latest[p.sample_id] = p
    return latest


def write_predictions(path: str | Path, predictions: Iterable[Prediction]) -> None:
    """Write a complete file atomically (used by import and baselines)."""
    # An error (or a bad record) leaves no stray temporary and the old file as it was.
    diskwrite.write_text(path, "".join(_line(p) for p in predictions))


FRAME_COLUMNS = (
    "sample_id", "status", "latitude", "longitude", "city", "country", "continent",
    "confidence", "refused", "original",
)


def prediction_frame(source: str | Path | dict[str, Prediction] | Iterable[Prediction]):
    """Predictions as a DataFrame (newest record per clip), the columns scoring needs.

    Reads a JSON Lines file column-wise with orjson, without building a Prediction per row,
    so scoring a million clips stays fast.
    """
    import pandas as pd

    if isinstance(source, str | Path):
        import orjson

        path = Path(source)
        try:
            raw = path.read_bytes().removeprefix(BOM)
        except FileNotFoundError:
            raise AglError(f"{path}: predictions file not found") from None
        fast = _arrow_frame(raw)
        if fast is not None:
            return _finish_frame(fast, str(path), ids_are_text=True)
        lines = raw.split(b"\n")
        rows = []
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
                problem = record_problem(rec)  # the shape scoring needs, checked per line
                if problem:
                    raise TypeError(problem)
                rows.append(tuple(rec.get(c) for c in FRAME_COLUMNS))
            except (orjson.JSONDecodeError, KeyError, ValueError, AttributeError,
                    TypeError) as exc:
                try:  # binary or non-UTF-8 bytes are a wrong file, never a torn line to skip
                    line.decode("utf-8")
                except UnicodeDecodeError as bad:
                    raise AglError(not_utf8(path, raw, n, bad.reason, "predictions file")) from None
                if n == len(lines) and not raw.endswith(b"\n"):
                    warnings.warn(TornLineWarning(path, n), stacklevel=2)
                    continue
                raise AglError(f"{path}: line {n}: not a prediction record ({exc})") from None
        frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
        return _finish_frame(frame, str(path))
    else:
        preds = source.values() if isinstance(source, dict) else source
        frame = pd.DataFrame(
            [tuple(getattr(p, c) for c in FRAME_COLUMNS) for p in preds], columns=list(FRAME_COLUMNS)
        )
        frame["status"] = frame["status"].astype(str)
    return _finish_frame(frame, "predictions")


def _finish_frame(frame, source: str, *, ids_are_text: bool = False):
    """Checks statuses, keeps the newest record per clip, and types the columns.
    `ids_are_text`: the ids are all `str` already (the Arrow reader's), not to be converted."""
    import numpy as np
    import pandas as pd

    bad = ~frame["status"].isin([s.value for s in Status])
    if bad.any():
        raise AglError(f"{source}: record for {frame.loc[bad, 'sample_id'].iloc[0]}: unknown status "
                       f"'{frame.loc[bad, 'status'].iloc[0]}'; expected one of "
                       f"{', '.join(s.value for s in Status)}")
    # One hash pass over the ids serves both the conflict check and the dedup; a file
    # without repeated clips (the usual case) skips the dedup copy altogether.
    dup = frame["sample_id"].duplicated(keep=False)
    if dup.any():
        _warn_conflicts(frame, dup, source)
        frame = frame.drop_duplicates("sample_id", keep="last").reset_index(drop=True)
    if not ids_are_text:
        frame["sample_id"] = frame["sample_id"].astype(str)
    for c in ("latitude", "longitude", "confidence"):
        values = pd.to_numeric(frame[c], errors="coerce").astype(float)
        if np.isinf(values.to_numpy()).any():
            values = values.where(np.isfinite(values))  # infinity is a missing value too
        frame[c] = values
    frame["refused"] = frame["refused"].eq(True)  # null is not a refusal (shape checked: bool or null)
    return frame


def _warn_conflicts(frame, dup, source: str) -> None:
    """Warn (with a count) when one clip has several finished records that disagree.

    `dup` marks every row whose clip has more than one record. A failed record followed by
    an answer is a resumed run (newest wins, as documented); two different answers for one
    clip are a merged or hand-edited file, and the last one silently winning would hide it."""
    rows = frame.loc[dup & (frame["status"] != Status.FAILED.value),
                     ["sample_id", "status", *PLACE_FIELDS]]
    if rows.empty:
        return
    distinct = rows.astype(str).drop_duplicates().groupby("sample_id").size()
    conflicting = distinct[distinct > 1]
    if len(conflicting):
        warnings.warn(f"{source}: {len(conflicting)} clip(s) have conflicting records (e.g. "
                      f"{conflicting.index[0]}); the last record of each is used",
                      stacklevel=3)


def _arrow_frame(raw: bytes):
    """Columnar read with pyarrow (~10x faster) for files without `original` fields.

    Imported files carry the authors' verbatim values in `original` (mixed types), which
    the generic reader handles; a torn or malformed file also falls back to it, whose
    errors name the line. The bytes are checked before pyarrow sees them
    (agl.predictions.lines: one object per line, UTF-8), and pyarrow must return one row
    per line: its reader crashes on some shapes and reads others differently.
    """
    if b'"original": {' in raw or b'"original":{' in raw or not raw.endswith(b"\n"):
        return None
    rows = object_lines(raw)
    if rows is None or utf8_problem(raw) is not None:
        return None
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        return None
    schema = pa.schema([
        ("sample_id", pa.string()), ("status", pa.string()), ("latitude", pa.float64()),
        ("longitude", pa.float64()), ("city", pa.string()), ("country", pa.string()),
        ("continent", pa.string()), ("confidence", pa.float64()), ("refused", pa.bool_()),
    ])
    try:
        table = pj.read_json(pa.BufferReader(raw), parse_options=pj.ParseOptions(  # read once
            explicit_schema=schema, unexpected_field_behavior="ignore"))
        if table.num_rows != rows or table["sample_id"].null_count or table["status"].null_count:
            return None
        # The ids are (nearly) all distinct, so pyarrow's object deduplication only costs time
        # there (~4x the conversion); the other text columns repeat a few values and keep it.
        frame = table.drop_columns(["sample_id"]).to_pandas()
        frame.insert(0, "sample_id", table["sample_id"].to_numpy(zero_copy_only=False))
    except pa.ArrowException:  # any other refusal of the fast path: the careful one names it
        return None
    frame["original"] = None
    return frame
