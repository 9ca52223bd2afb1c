"""One file by URL onto disk, bounded, and checked before anything keeps it.

`agl.http.client.stream_to_file` streams an http(s) URL into a `.part` file through agl's
bounded client (per-read timeout, total deadline, size cap counted after decoding, redirects
within the host), hashing as it goes: nothing is held in memory. `copy_local` does the same
for a `file://` source (a device or a huge file stops at the cap too).
`content_problem` is the check a file passes before it enters a cache: not an HTML page
(an error page served with 200 would otherwise be read back on every later run), and it
parses as what its name says (.json, .jsonl, .csv, .md: UTF-8 text of that shape).
"""

from __future__ import annotations

import codecs
import hashlib
import json
from pathlib import Path

from agl.core.nofollow import NotARegularFile, open_part
from agl.http.client import Refused, is_html_type, looks_like_html

_BLOCK = 1 << 20


def copy_local(src: Path, part: Path, max_bytes: int | None) -> str:
    """`src` copied into `part` in blocks, at most `max_bytes`; its SHA-256. Raises
    `Refused` past the cap (and `part` is removed)."""
    digest, size = hashlib.sha256(), 0
    try:
        with open(src, "rb") as fin, open_part(part) as fout:  # never through a link
            for block in iter(lambda: fin.read(_BLOCK), b""):
                size += len(block)
                if max_bytes is not None and size > max_bytes:
                    raise Refused(f"{src} holds more than {max_bytes:,} bytes; not copied")
                fout.write(block)
                digest.update(block)
    except NotARegularFile:
        raise  # not ours: the planted thing is left for the user to see
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def content_problem(path: Path, name: str, content_type: str | None = None) -> str | None:
    """Why the file at `path` (named `name` at its source) is not the document it should
    be, or None: an HTML page, or not parseable as its extension says."""
    suffix = Path(name).suffix.lower()
    if suffix in (".html", ".htm"):
        return None
    with open(path, "rb") as fh:
        head = fh.read(512)
    if is_html_type(content_type) or looks_like_html(head):
        return "the server sent an HTML page, not the file (an error page served as a success)"
    if suffix not in (".json", ".jsonl", ".csv", ".md", ".txt"):
        return None
    decoder, first = codecs.getincrementaldecoder("utf-8-sig")(), ""
    try:
        with open(path, "rb") as fh:  # in blocks: a file near the cap is never held whole
            for block in iter(lambda: fh.read(_BLOCK), b""):
                text = decoder.decode(block)
                if len(first) < 4 * _BLOCK:  # the first lines: a header, a first record
                    first += text
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text ({exc.reason})"
    first = first.split("\n", 1)[0] if suffix != ".jsonl" else next(
        (line for line in first.splitlines() if line.strip()), "")
    if suffix == ".json":
        try:
            with open(path, encoding="utf-8-sig") as fh:
                json.load(fh)
        except json.JSONDecodeError as exc:
            return f"not valid JSON ({exc.msg}, line {exc.lineno})"
    elif suffix == ".jsonl":
        try:
            json.loads(first)
        except json.JSONDecodeError as exc:
            return f"not JSON Lines (first line: {exc.msg})"
    elif suffix == ".csv" and "," not in first:
        return "not a CSV file (no comma in the header line)"
    return None
