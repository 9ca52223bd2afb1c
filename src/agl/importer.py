"""Import the authors' published result files into this project's predictions format.

Two published shapes share one set of field names: a JSON list
(`seed_42_progress_fixed.json`) and JSON Lines (`seed_42_ABCD.jsonl`). Each row has
`question_id`, `predicted_{latitude,longitude,city,country,continent}`, `reasoning` and
`model_output` (the raw reply, empty in some files).

Without reparsing, the authors' parsed fields are kept: usable values become the
prediction's fields, and the five values are also stored verbatim in `original`, so the
`paper` protocol scores exactly what the authors scored. With `reparse=True` the prediction
comes from running this project's parser on `model_output`; rows without raw text cannot be
reparsed and are written as `unparseable` with that reason, and counted.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl.errors import AglError
from agl.parse import REFUSAL_VALUES, parse_reply
from agl.predictions import PLACE_FIELDS, Prediction, Status

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
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AglError(f"{path}: published file not found") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise AglError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise AglError(f"{path}: line {n}: not valid JSON ({exc.msg})") from None
    for n, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or "question_id" not in row:
            raise AglError(f"{path}: row {n}: no 'question_id'; is this an AGL1K result file?")
        absent = [f for f in PUBLISHED_FIELDS if f not in row]
        if absent and not row.get("model_output"):
            raise AglError(f"{path}: row {n} ({row['question_id']}): missing {', '.join(absent)}")
    return rows


def is_published_file(path: str | Path) -> bool:
    """True when the file looks like an authors' result file rather than our predictions."""
    with open(path, encoding="utf-8") as fh:
        head = fh.read(4096)
    return head.lstrip().startswith("[") or ('"question_id"' in head and '"sample_id"' not in head)


def _is_refusal(value: Any) -> bool:
    return value is None or str(value).strip().lower() in REFUSAL_VALUES | {"0", "0.0", "-1"}


def _coordinate(value: Any, limit: float) -> float | None:
    if _is_refusal(value):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if abs(x) <= limit else None


def from_published_row(row: dict[str, Any]) -> Prediction:
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


def import_published(path: str | Path, *, reparse: bool = False) -> list[Prediction]:
    """The published file as predictions (see `import_with_report` for the counts)."""
    return import_with_report(path, reparse=reparse)[0]


def import_with_report(
    path: str | Path, *, reparse: bool = False
) -> tuple[list[Prediction], ImportReport]:
    rows = read_published(path)
    report = ImportReport(rows=len(rows))
    seen: set[str] = set()
    out: list[Prediction] = []
    for n, row in enumerate(rows, start=1):
        sid = str(row["question_id"])
        if sid in seen:
            raise AglError(f"{path}: row {n}: question_id {sid} appears twice")
        seen.add(sid)
        if row.get("question"):
            report.prompts[row["question"]] += 1
        if reparse:
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
        else:
            p = from_published_row(row)
        report.statuses[p.status.value] += 1
        out.append(p)
    return out, report
