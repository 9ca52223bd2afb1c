"""When each clip was recorded (from its tags) and uploaded (from the Archive's item metadata).

Both become manifest columns (`DATE_COLUMNS`), each with its source, blank where nothing says:

* `date` (the recording date; the column birdrange already reads) and `date_source`: the
  most specific date the file's tags give. A full date (`2002-02-07 16:18:00` in the
  Essaouira clip's COMM frame) wins over a year alone (the same file's TDRC says `2015`, the
  year it was tagged, not recorded); among equally specific ones the first in `FRAMES` order.
  A month and year (`Juni 2003` in a title) gives `2003-06`. The tags are read as the tag
  audit reads them (`agl.core.container.tags`); the file's name is not (a name is not what
  the file carries; the tag audit reports dates in names).
* `upload_date` and `upload_date_source`: the item's `publicdate` in the Archive's metadata
  (`<download.metadata_url>/<key>`; else `addeddate`), the day the recording became public:
  a clip uploaded after a model's training cutoff cannot be in its training data.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agl.core.container import tags
from agl.dataset.manifest import DATE_COLUMNS  # noqa: F401  (the columns this module fills)

# Text frames read for a recording date, in order of trust (a dedicated date frame first).
FRAMES = ("TDRC", "TDOR", "TYER", "TORY", "COMM", "TIT2", "TIT3", "TALB", "date", "DATE",
          "comment", "COMMENT", "title", "TITLE", "\xa9day", "\xa9cmt")
_FULL = re.compile(r"(?<!\d)((?:19|20)\d\d)-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(?!\d)")
_YEAR = re.compile(r"^\s*((?:19|20)\d\d)\s*$")
_MONTHS = {m: i + 1 for i, names in enumerate((
    "january januar janvier enero gennaio", "february februar fevrier février febrero febbraio",
    "march märz marz mars marzo", "april avril abril aprile", "may mai mayo maggio",
    "june juni juin junio giugno", "july juli juillet julio luglio", "august aout août agosto",
    "september septembre septiembre settembre", "october oktober octobre octubre ottobre",
    "november novembre noviembre", "december dezember decembre décembre diciembre dicembre",
)) for m in names.split()}
_MONTH_YEAR = re.compile(r"\b([a-zäéû]+)\s+((?:19|20)\d\d)\b", re.I)


def from_texts(texts: Iterable[tuple[str, str]]) -> tuple[str, str]:
    """(date, source) from tag texts: full date, else month and year, else year; ('', '')."""
    texts = list(texts)
    for frame, t in texts:
        m = _FULL.search(t)
        if m:
            return f"{m[1]}-{m[2]}-{m[3]}", f"tags:{frame}"
    for frame, t in texts:
        for word, year in _MONTH_YEAR.findall(t):
            month = _MONTHS.get(word.lower())
            if month:
                return f"{year}-{month:02d}", f"tags:{frame}"
    for frame, t in texts:
        m = _YEAR.match(t)
        if m:
            return m[1], f"tags:{frame}"
    return "", ""


def recorded_on(path: str | Path) -> tuple[str, str]:
    """The recording date its tags give a file, and which frame; ('', '') when none does or the
    file has no tags. The tags are read as the tag audit reads them (`agl.core.container.tags`:
    ID3v2, ID3v1, APEv2, Vorbis comments, RIFF INFO, MP4 atoms)."""
    try:
        found = tags(path)
    except OSError:
        return "", ""
    texts = [(t.key.split(":")[0], t.text) for t in found if t.key.split(":")[0] in FRAMES]
    return from_texts(sorted(texts, key=lambda ft: FRAMES.index(ft[0])))


def uploaded_on(doc: Any) -> tuple[str, str]:
    """The public date in an Archive item's metadata document, and which field."""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return "", ""
    for field in ("publicdate", "addeddate"):
        m = _FULL.search(str(meta.get(field) or ""))
        if m:
            return f"{m[1]}-{m[2]}-{m[3]}", f"archive:{field}"
    return "", ""


def with_dates(frame, audio_root: str | Path, metadata: Callable[[str], Any] | None,
               known=None):
    """`frame` with `DATE_COLUMNS`: tags read from `<audio_root>/<key>/<mp3name>`, upload dates
    from `metadata(key)` (an item's document, or None) unless `known` (an earlier manifest with
    the columns) already holds the key's (the Archive is asked once per item)."""
    frame = frame.copy()
    before = {}
    if known is not None and "upload_date_source" in known:
        before = {str(k): (str(d or ""), str(s or "")) for k, d, s in
                  zip(known["key"], known["upload_date"], known["upload_date_source"], strict=True)
                  if str(s or "")}
    rec, up = [], []
    for key, name in zip(frame["key"], frame["mp3name"], strict=True):
        path = Path(audio_root) / str(key) / str(name)
        rec.append(recorded_on(path) if path.is_file() else ("", ""))
        if str(key) in before:
            up.append(before[str(key)])
        elif metadata is None:
            up.append(("", ""))
        else:
            doc = metadata(str(key))
            got = uploaded_on(doc)
            # an item the Archive answered without a date is recorded as such, not asked again
            up.append(got if got[0] or doc is None else ("", "archive:no date"))
    frame["date"], frame["date_source"] = [r[0] for r in rec], [r[1] for r in rec]
    frame["upload_date"], frame["upload_date_source"] = [u[0] for u in up], [u[1] for u in up]
    return frame


def after(upload_dates: Iterable[Any], cutoff: str) -> list[bool | None]:
    """Per clip: uploaded after `cutoff` (True), on or before it (False), unknown (None). A
    date is compared at its precision: `2024-06` is after `2024-05-31`."""
    out = []
    for d in upload_dates:
        d = "" if d is None or (isinstance(d, float) and d != d) else str(d).strip()
        if not d:
            out.append(None)
        elif len(d) < len(cutoff):
            out.append(d > cutoff[: len(d)] if d != cutoff[: len(d)] else None)
        else:
            out.append(d[: len(cutoff)] > cutoff)
    return out
