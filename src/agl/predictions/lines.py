"""The shape of a predictions file, checked before a fast reader touches it.

`agl.predictions.records.prediction_frame` reads a JSON Lines file column-wise with pyarrow,
which is ~10x faster than a parser per line, but pyarrow's JSON reader trusts its input: a
first line `null` crashes the process (SIGSEGV, pyarrow 25), a line holding two objects
becomes two rows, and a Latin-1 byte inside a string fails late, deep in the conversion. So
the bytes are checked first, at C speed (numpy and one decode, no Python loop per line):

* `object_lines(raw)`: every non-blank line is `{...}`; their count (the rows pyarrow must
  return, so two objects on one line or one object over two lines never pass);
* `utf8_problem(raw)`: where the file stops being UTF-8 (line and reason), or None.

Whatever fails a check goes to the careful reader (one parse per line), whose error names
the file, the line and what is wrong. `record_problem` is that reader's check of each parsed
line: an object with the fields scoring needs, of the right types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (Windows editors write one): not part of line 1
STATUSES = ("ok", "partial", "refused", "unparseable", "failed", "truncated")  # agl.predictions.records.Status
NUMBER_FIELDS = ("latitude", "longitude", "confidence")
TEXT_FIELDS = ("city", "country", "continent")
_SPACE = np.zeros(256, dtype=bool)
_SPACE[[ord(c) for c in " \t\r\f\v"]] = True


def object_lines(raw: bytes) -> int | None:
    """How many records `raw` holds when every non-blank line is one `{...}` (spaces and a
    CR around it allowed), else None. `raw` must end with a newline."""
    if not raw.endswith(b"\n"):
        return None
    data = np.frombuffer(raw, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], ends[:-1] + 1))
    # Fast case: no leading or trailing spaces anywhere (what every writer of this format
    # does); a line with them is trimmed in Python, rare enough not to matter.
    nonblank = ends > starts
    first = data[starts[nonblank]]
    last = data[ends[nonblank] - 1]
    if not (first == ord("{")).all() or not ((last == ord("}")) | (last == 13)).all():
        return _object_lines_slow(raw)
    cr = last == 13
    if cr.any():  # CRLF: the character before the CR must close the object
        before = data[ends[nonblank][cr] - 2]
        if (ends[nonblank][cr] - 2 < starts[nonblank][cr]).any() or not (before == ord("}")).all():
            return _object_lines_slow(raw)
    return int(nonblank.sum())


def _object_lines_slow(raw: bytes) -> int | None:
    n = 0
    for line in raw.split(b"\n"):
        text = line.strip()
        if not text:
            continue
        if not (text.startswith(b"{") and text.endswith(b"}")):
            return None
        n += 1
    return n


def utf8_problem(raw: bytes) -> tuple[int, str] | None:
    """(1-based line, reason) of the first byte that is not UTF-8, or None."""
    if raw.isascii():  # the usual file, checked ~10x faster than by decoding it
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return raw.count(b"\n", 0, exc.start) + 1, exc.reason
    return None


def not_utf8(source: object, raw: bytes, line: int, reason: str, what: str) -> str:
    """The one line for a file that is not UTF-8: where, and what to do about it."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return (f"{source}: UTF-16 text (it starts with a UTF-16 byte-order mark); save the "
                f"{what} as UTF-8")
    return (f"{source}: line {line}: not UTF-8 text ({reason}); save the {what} as UTF-8 "
            "(a Latin-1 or Windows-1252 export, or not a text file at all)")


def record_problem(rec: Any) -> str | None:
    """Why a parsed line is not a prediction record (its shape only), or None."""
    if not isinstance(rec, dict):
        return f"a JSON {_kind(rec)}, not an object"
    for name in ("sample_id", "status"):
        if name not in rec:
            return f"no '{name}' field"
    sid = rec["sample_id"]
    if isinstance(sid, bool) or not isinstance(sid, str | int):
        return f"sample_id must be text, got a JSON {_kind(sid)}"
    status = rec["status"]
    if status not in STATUSES:
        shown = status if isinstance(status, str) else f"a JSON {_kind(status)}"
        return f"status {str(shown)[:40]!r} is not one of {', '.join(STATUSES)}"
    for name in NUMBER_FIELDS:
        v = rec.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            return f"{name} must be a number or null, got a JSON {_kind(v)}"
    for name in TEXT_FIELDS:
        v = rec.get(name)
        if v is not None and not isinstance(v, str):
            return f"{name} must be text or null, got a JSON {_kind(v)}"
    refused = rec.get("refused")
    if refused is not None and not isinstance(refused, bool):
        return f"refused must be true, false or null, got a JSON {_kind(refused)}"
    return None


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)
