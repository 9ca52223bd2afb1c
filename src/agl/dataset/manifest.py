"""The benchmark manifest: one row per clip, with its true place and sound categories.

The published AGL1K manifest has a known defect: its header has 19 names for 20 fields,
because `channel_environment_and_background` stands for two columns, `channel` and
`environment_and_background`. A plain `pandas.read_csv` silently shifts every column by one.
`load_manifest` detects exactly this defect, repairs it with one warning, and refuses every
other shape mismatch with an error naming the row and field.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from agl.core import diskwrite
from agl.dataset.manifest_text import (
    MAX_FIELD_CHARS,
    check_text,
    csv_records,
    decode_manifest,
    long_field,
    long_field_error,
    shown,
)
from agl.errors import AglError

CATEGORY_COLUMNS: tuple[str, ...] = (
    "human_sounds",
    "animal",
    "music",
    "natural_sounds",
    "channel",
    "environment_and_background",
    "sounds_of_things",
    "source_ambiguous_sounds",
)
MERGED_CATEGORY = "channel_environment_and_background"
REQUIRED_COLUMNS: tuple[str, ...] = (
    "key",
    "longitude",
    "latitude",
    "mp3name",
    "mp3seconds",
    "city",
    "country",
    "continent",
    *CATEGORY_COLUMNS,
)
# The full AGL1K column order, used when this project writes a manifest (crawl, demo set).
COLUMNS: tuple[str, ...] = (
    "key",
    "short_key",
    "longitude",
    "latitude",
    "altitude",
    "description",
    "title",
    "mp3name",
    "mp3seconds",
    "city",
    "country",
    "continent",
    *CATEGORY_COLUMNS,
)
# When a clip was recorded and uploaded, with their sources (agl.dataset.dates).
DATE_COLUMNS: tuple[str, ...] = ("date", "date_source", "upload_date", "upload_date_source")
NUMERIC_COLUMNS = ("latitude", "longitude", "mp3seconds", *CATEGORY_COLUMNS)


class ManifestWarning(UserWarning):
    """A defect of the input that was repaired; the message says what."""


@dataclass(frozen=True)
class Clip:
    """One recording of the manifest."""

    key: str
    mp3name: str
    latitude: float
    longitude: float
    seconds: float
    city: str
    country: str
    continent: str
    # When it was recorded (ISO date), from an optional `date` column: AGL1K has none; the
    # birdrange backend uses it for the week of BirdNET's range model when present.
    date: str = ""
    # The uploader's title (manifest `title`): never sent to a model, except by the blind
    # baseline with `inputs: title` (agl.backends.blind), whose point is what it alone tells.
    title: str = ""

    @property
    def relpath(self) -> str:
        """Where the clip lives under an audio root: the Internet Archive's layout."""
        return f"{self.key}/{self.mp3name}"


def load_manifest(path: str | Path, *, columns: list[str] | None = None) -> pd.DataFrame:
    """Load and validate a manifest CSV into a DataFrame indexed 0..n-1.

    Numeric columns are floats; text columns are strings ('' where empty). `columns`
    keeps only those (the required ones are always validated and kept), which makes
    scoring a large pool faster. Raises AglError naming the row and field on any defect.
    """
    path = Path(path)
    if path.is_dir():
        raise AglError(f"{path}: is a folder; pass --manifest with the manifest CSV file")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AglError(f"{path}: manifest not found; pass --manifest with an existing CSV") from None
    except OSError as exc:
        raise AglError(f"{path}: cannot read the manifest ({exc.strerror or exc})") from None
    # Encoding and NUL bytes are checked before either parser sees the file (manifest_text).
    text = decode_manifest(raw, str(path))
    fast = _read_arrow(raw, text, str(path), columns)
    if fast is not None:
        return fast
    return parse_manifest(text, source=str(path))


def parse_manifest(text: str, source: str = "<manifest>") -> pd.DataFrame:
    # The header and first record decide the column names (csv module: a record may span
    # lines); the C parser then reads every row and any row of another width is an error.
    check_text(text, source)
    text = text.removeprefix("\ufeff")
    head = csv_records(text, source, 2)
    if not head or not any(head[0]):
        raise AglError(f"{source}: empty file; a manifest needs a header and rows")
    header = [h.strip() for h in head[0]]
    if len(head) < 2 or not any(head[1]):
        raise AglError(f"{source}: no data rows under the header")
    header = _repair_header(header, head[1], source)
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise AglError(f"{source}: header names {', '.join(dupes)} more than once")
    numeric = [c for c in NUMERIC_COLUMNS if c in header]
    frame = _read_frame(text, header, numeric, source)
    # The parser cannot tell a missing trailing field from an empty one; the layout's last
    # column is empty only in an untagged pool (`agl crawl` leaves the categories to the tag
    # stage), so where it is empty the csv module counts that row's fields.
    short = frame[header[-1]].isna()
    if short.any() and header[-1] in CATEGORY_COLUMNS:
        records = [r for r in csv_records(text, source) if r][1:]
        if len(records) == len(frame):
            short &= pd.Series([len(r) < len(header) for r in records], index=frame.index)
    if short.any():
        i = int(short.idxmax())
        raise AglError(f"{source}: row {i + 1}: fewer than {len(header)} fields (the last, "
                       f"'{header[-1]}', is empty); fix the quoting or the number of commas")
    text_cols = [c for c in header if c not in numeric or frame[c].dtype == object]
    frame[text_cols] = frame[text_cols].fillna("")
    too_long = long_field(frame, text_cols, len(text))
    if too_long:
        raise long_field_error(source, *too_long)
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise AglError(f"{source}: missing required column(s) {', '.join(missing)}")
    _validate(frame, source)
    return frame


def _read_frame(text: str, header: list[str], numeric: list[str], source: str) -> pd.DataFrame:
    """Every row by pandas' C parser; a row of another width is one line naming it."""
    read = dict(names=header, skiprows=1, keep_default_na=False, na_values=["\x00"],
                skip_blank_lines=True)
    try:
        try:  # numbers parsed by the C parser: ~5x faster than converting strings afterwards
            frame = pd.read_csv(io.StringIO(text), dtype={c: (float if c in numeric else str)
                                                          for c in header}, **read)
        except ValueError as exc:
            if isinstance(exc, pd.errors.ParserError):
                raise
            frame = pd.read_csv(io.StringIO(text), dtype=str, **read)  # to name the bad cell
    except pd.errors.ParserError as exc:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if m:
            raise AglError(f"{source}: line {m[2]}: {m[3]} fields but the header names {len(header)}; "
                           "fix the quoting or the number of commas in that row") from None
        raise AglError(f"{source}: not a readable CSV ({exc})") from None
    if not isinstance(frame.index, pd.RangeIndex):
        # pandas turns the leading fields into an index when rows have more fields than
        # the header names: that is a shape error, never data.
        records = [r for r in csv_records(text, source) if r][1:]
        row = next((i for i, r in enumerate(records) if len(r) > len(header)), 0)
        raise AglError(f"{source}: row {row + 1}: more fields than the header's "
                       f"{len(header)} names; fix the quoting or the number of commas")
    return frame


def _read_arrow(raw: bytes, text: str, source: str,
                columns: list[str] | None = None) -> pd.DataFrame | None:
    """The whole manifest through pyarrow's CSV reader (~5x faster on large pools).

    `raw` is the file's bytes, `text` the same decoded and checked (agl.dataset.manifest_text).
    Any irregularity (shape, a non-number, a runaway field) returns None, and the pandas path
    then reads the text again to name the row and field in its error.
    """
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:
        return None
    try:
        head = csv_records(text, source, 2)
        if len(head) < 2:
            return None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ManifestWarning)
            header = _repair_header([h.strip() for h in head[0]], head[1], source)
        if len(set(header)) != len(header) or any(c not in header for c in REQUIRED_COLUMNS):
            return None
        numeric = [c for c in NUMERIC_COLUMNS if c in header]
        table = pcsv.read_csv(
            pa.BufferReader(raw),
            read_options=pcsv.ReadOptions(column_names=header, skip_rows=1),
            parse_options=pcsv.ParseOptions(newlines_in_values=True),
            convert_options=pcsv.ConvertOptions(
                column_types={c: (pa.float64() if c in numeric else pa.string()) for c in header},
                strings_can_be_null=False, quoted_strings_can_be_null=False,
                null_values=[""],
            ),
        )
        table = _arrow_checked(table)
        if table is None:
            return None
        if columns is not None:
            table = table.select([c for c in header if c in set(columns) | set(REQUIRED_COLUMNS)])
    except (AglError, pa.ArrowException):
        return None
    frame = table.to_pandas()
    if frame[[c for c in numeric if c not in CATEGORY_COLUMNS]].isna().any().any():
        return None
    try:
        _validate(frame, source, names_checked=True)
    except AglError:
        return None
    for w in caught:
        warnings.warn(w.message, ManifestWarning, stacklevel=3)
    return frame


def _arrow_checked(table):
    """The Arrow table with its place names trimmed, or None where the exact-message path must
    read it: a bad key or file name, a repeated key, a runaway field."""
    import pyarrow as pa  # optional: only where pyarrow reads the manifest
    import pyarrow.compute as pc  # (as above)

    # Names checked in Arrow (vectorised): a bad one sends us to the exact-message path.
    for col in ("key", "mp3name"):
        names = table[col]
        bad = pc.or_(pc.match_substring_regex(names, r"[/\\\x00]|^\s|\s$"),
                     pc.is_in(names, pa.array(["", ".", ".."])))
        if pc.any(bad).as_py():
            return None
    if pc.count_distinct(table["key"]).as_py() != table.num_rows:
        return None
    for col in ("city", "country", "continent"):
        i = table.schema.get_field_index(col)
        table = table.set_column(i, col, pc.utf8_trim_whitespace(table[col]))
    # Every column is read (a runaway field in one not asked for is still one), then
    # only those asked for are converted. Bytes >= characters: the exact check is later.
    for col in table.columns:
        if pa.types.is_string(col.type) and (pc.max(pc.binary_length(col)).as_py() or 0) > MAX_FIELD_CHARS:
            return None
    return table


def _repair_header(header: list[str], first: list[str], source: str) -> list[str]:
    """Split the merged category name when the rows have exactly one field more.

    Decided on the first record; the full parse then holds every other row to that width.
    """
    if MERGED_CATEGORY in header and len(first) == len(header) + 1:
        i = header.index(MERGED_CATEGORY)
        warnings.warn(
            f"{source}: header has {len(header)} names for {len(header) + 1} fields; "
            f"split '{MERGED_CATEGORY}' into 'channel' and 'environment_and_background'",
            ManifestWarning,
            stacklevel=3,
        )
        return header[:i] + ["channel", "environment_and_background"] + header[i + 1 :]
    return header


def _validate(frame: pd.DataFrame, source: str, *, names_checked: bool = False) -> None:
    def fail(i: int, field: str, what: str) -> None:
        key = frame.at[i, "key"] if field != "key" or what.startswith("duplicate") else ""
        where = f"row {i + 1}" + (f" (key {shown(key)})" if key else "")
        raise AglError(f"{source}: {where} field '{field}': {what}")

    numeric = {
        "latitude": (-90.0, 90.0),
        "longitude": (-180.0, 180.0),
        "mp3seconds": (0.0, float("inf")),
        **{c: (0.0, 1.0) for c in CATEGORY_COLUMNS},
    }
    for col, (lo, hi) in numeric.items():
        # An empty category cell means "not tagged yet" (a crawled pool, before the tag
        # stage): it stays NaN, never a guessed 0. Every other numeric cell is required.
        if col not in CATEGORY_COLUMNS:
            untagged = pd.Series(False, index=frame.index)
        elif frame[col].dtype == float:
            untagged = frame[col].isna()
        else:
            untagged = frame[col].fillna("").str.strip().eq("")
        if frame[col].dtype == float:
            values = frame[col]
            for i in values.index[values.isna() & ~untagged][:1]:
                fail(int(i), col, "'' is not a number")
        else:
            values = pd.to_numeric(frame[col], errors="coerce")
        bad = values.isna() & ~untagged
        if bad.any():  # retry the few bad cells with surrounding spaces removed
            values[bad] = pd.to_numeric(frame.loc[bad, col].str.strip(), errors="coerce")
        for i in values.index[values.isna() & ~untagged][:1]:
            fail(int(i), col, f"'{shown(frame.at[i, col])}' is not a number")
        for i in values.index[(values < lo) | (values > hi)][:1]:
            fail(int(i), col, f"{values[i]} is outside [{lo}, {hi}]")
        for i in values.index[values.abs() == float("inf")][:1]:  # [0, inf] holds no infinity
            fail(int(i), col, f"'{shown(frame.at[i, col])}' is not a finite number")
        frame[col] = values.astype(float)
    for col in () if names_checked else ("key", "mp3name"):
        names = frame[col]
        bad = names.str.contains(r"[/\\\x00]|^\s|\s$", regex=True) | names.isin(["", ".", ".."])
        for i in names.index[bad][:1]:
            fail(int(i), col, f"'{shown(names[i])}' is not a plain file name (no '/', '\\', '..')")
    dup = frame["key"].duplicated(keep="first") if not names_checked else pd.Series(False)
    if dup.any():
        i = int(dup.idxmax())
        first = int(frame.index[frame["key"] == frame.at[i, "key"]][0])
        fail(i, "key", f"duplicate key, first seen in row {first + 1}")
    for col in () if names_checked else ("city", "country", "continent"):
        frame[col] = frame[col].fillna("").str.strip()


def clips(frame: pd.DataFrame) -> list[Clip]:
    """The manifest as Clip records, in manifest order."""
    return [
        Clip(
            key=r.key,
            mp3name=r.mp3name,
            latitude=float(r.latitude),
            longitude=float(r.longitude),
            seconds=float(r.mp3seconds),
            city=r.city,
            country=r.country,
            continent=r.continent,
            date=str(getattr(r, "date", "") or ""),
            title=_text(getattr(r, "title", "")),
        )
        for r in frame.itertuples(index=False)
    ]


def _text(v) -> str:
    """A text cell as text: a missing one (NaN, None) is ''."""
    return "" if v is None or (isinstance(v, float) and v != v) else str(v)


def write_manifest(frame: pd.DataFrame, path: str | Path | BinaryIO) -> None:
    """Write a manifest with the full AGL1K column layout (20 names for 20 fields), to a path
    or to a file open for writing bytes (a `.part` opened without following links)."""
    # The dates (agl.dataset.dates) follow the AGL1K layout where a download found them; a
    # manifest without them (the demo's) keeps its 20 columns, byte for byte.
    dated = [c for c in DATE_COLUMNS if c in frame]
    out = frame.reindex(columns=[*COLUMNS, *dated]).fillna("")
    if not isinstance(path, (str, Path)):
        text = io.TextIOWrapper(path, encoding="utf-8", newline="")  # as to_csv opens a path
        out.to_csv(text, index=False)
        text.detach()  # flushed; the caller closes its file
        return
    diskwrite.write_text(path, out.to_csv(index=False))


def content_hash(path: str | Path) -> str:
    """SHA-256 of a file's bytes: the data version recorded with every run."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


SYNTHETIC_MARK = "SYNTHETIC"


def dataset_label(frame: pd.DataFrame) -> str:
    """How a report names the data: the embedded demo is labelled synthetic wherever shown."""
    titles = frame["title"] if "title" in frame else pd.Series([], dtype=str)
    if len(titles) and titles.astype(str).str.startswith(SYNTHETIC_MARK).all():
        return f"{SYNTHETIC_MARK} demo set ({len(frame)} generated clips; not AGL1K recordings)"
    return f"{len(frame)} clips"
