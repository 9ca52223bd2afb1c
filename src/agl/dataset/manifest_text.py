"""A manifest's bytes, checked before any CSV parser reads them.

Every reader of a manifest (`agl evaluate`, `infer`, `filter`, `download`, `play` and the
stages) goes through `agl.dataset.manifest.load_manifest` or `parse_manifest`, and both start
here, so a file in the wrong encoding, with a NUL byte or with a runaway field is one line
naming the file, the line or row, and what to do, whichever parser would have met it first:

* encoding: UTF-8, with or without a byte-order mark (Excel writes one); UTF-16 (Excel's
  "Unicode text") and Latin-1 / Windows-1252 exports are refused with the line of the first
  bad byte. The file is never guessed into another encoding: a wrong guess would change
  place names silently.
* NUL bytes: refused with their line. pyarrow's CSV reader keeps them in a value and the
  csv module refuses them; either way a NUL is not text a manifest holds.
* field size: a field longer than `MAX_FIELD_CHARS` (128 Ki characters, the csv module's
  own default limit) is refused naming its row and column. No clip's metadata is that
  long; such a field is nearly always an unbalanced quote that swallowed the rows after it.
  The csv module reads the header with its limit raised to the file's size, so it never
  raises its own `field larger than field limit` traceback.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
from collections.abc import Iterator

from agl.errors import AglError

MAX_FIELD_CHARS = 131_072
HEAD_CHARS = 1 << 20
SHOWN_CHARS = 60  # a bad value quoted in an error is cut to this: one readable line


def decode_manifest(raw: bytes, source: str) -> str:
    """The manifest's text (a UTF-8 byte-order mark dropped), or one AglError line naming
    the line of the first byte that is not UTF-8, or a NUL byte."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise AglError(f"{source}: UTF-16 text (it starts with a UTF-16 byte-order mark); save "
                       "the manifest as UTF-8 (Excel: CSV UTF-8)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise AglError(f"{source}: line {line}: not UTF-8 text ({exc.reason}); save the manifest "
                       "as UTF-8 (Excel: CSV UTF-8), not Latin-1 or Windows-1252") from None
    check_text(text, source)
    return text


def check_text(text: str, source: str) -> None:
    """One AglError naming the line of a NUL character, the one character no manifest holds."""
    nul = text.find("\x00")
    if nul >= 0:  # the CSV parsers would cut the cell there, keep it, or refuse it
        line = text.count("\n", 0, nul) + 1
        raise AglError(f"{source}: line {line}: contains a NUL byte; a manifest is plain text "
                       "(re-export it, or remove the byte)")


@contextlib.contextmanager
def _field_limit(n: int) -> Iterator[None]:
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, n + 1))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def csv_records(text: str, source: str, limit: int | None = None) -> list[list[str]]:
    """The first `limit` records (all when None) as the csv module reads them; a field of any
    length is read (`long_field` judges it), any other csv error is one line naming the line.
    The header and first record come from the text's first megabyte when they fit in it
    (a million-row pool is not copied to read two records)."""
    if limit is not None and len(text) > HEAD_CHARS:
        head = io.StringIO(text[:HEAD_CHARS], newline="")
        rows = _records(head, source, limit, HEAD_CHARS)
        if len(rows) == limit and head.tell() < HEAD_CHARS:  # the last one ended inside it
            return rows
    return _records(io.StringIO(text, newline=""), source, limit, len(text))


def _records(buf: io.StringIO, source: str, limit: int | None, size: int) -> list[list[str]]:
    reader = csv.reader(buf)
    with _field_limit(size):
        try:
            return list(itertools.islice(reader, limit))
        except csv.Error as exc:
            raise AglError(f"{source}: line {reader.line_num}: not readable CSV ({exc}); fix the "
                           "quoting in that line") from None


def long_field(frame, columns: list[str], text_chars: int) -> tuple[int, str, int] | None:
    """(0-based row, column, length) of the first field of `columns` longer than
    MAX_FIELD_CHARS, or None (at once when the whole text is not that long)."""
    if text_chars <= MAX_FIELD_CHARS:
        return None
    for name in columns:
        lengths = frame[name].astype(str).str.len()
        over = lengths > MAX_FIELD_CHARS
        if over.any():
            i = int(over.to_numpy().argmax())
            return i, name, int(lengths.iloc[i])
    return None


def long_field_error(source: str, row: int, column: str, length: int) -> AglError:
    return AglError(f"{source}: row {row + 1} field '{column}': {length:,} characters, more than "
                    f"a manifest field holds ({MAX_FIELD_CHARS:,}); usually an unbalanced quote (\") "
                    "that swallowed the rows after it: fix the quoting, or shorten the field")


def shown(value: object) -> str:
    """A cell's value as quoted in an error line: cut, never a 200 KB line."""
    text = str(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} chars)"
