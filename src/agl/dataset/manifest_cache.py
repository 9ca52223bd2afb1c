"""A validated manifest, kept by content hash so the same bytes are never validated twice.

`load_manifest` parses and checks every row (numbers, ranges, file names, duplicate keys);
on a large pool that is most of an evaluation's time, and it gives the same table for the
same bytes. The validated table is stored as an Arrow (Feather) file named by
`<sha256 of the manifest>-<code version>`:

* content-addressed: other bytes give another name, so a stale entry can never be read;
* invalidated by code: the code version hashes the loader's own source (and pandas' and
  pyarrow's major versions), so a change of the validation rules validates again;
* crash-safe: written to a temporary file in the same folder, then renamed; an entry that
  cannot be read is ignored and rewritten; a cache that cannot be written is skipped;
* warnings kept: a repaired header's warning is stored with the table and shown again,
  naming the file passed this time (the same bytes may sit at several paths).

Where: `$AGL_CACHE_DIR/manifests`, else `$XDG_CACHE_HOME/agl/manifests`, else
`~/.cache/agl/manifests`. `AGL_CACHE_DIR=off` turns it off. Only tables that passed
validation are stored; a manifest with a defect fails the same way every time.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from functools import cache
from pathlib import Path

import pandas as pd

from agl.core import diskwrite
from agl.dataset import manifest as manifest_module
from agl.dataset import manifest_text
from agl.dataset.manifest import REQUIRED_COLUMNS, ManifestWarning, content_hash, load_manifest
from agl.errors import AglError

_WARNINGS_KEY = b"agl.manifest_warnings"
_PATH = "<<manifest>>"  # stands for the manifest's path in a stored warning


def cache_root() -> Path | None:
    env = os.environ.get("AGL_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env) / "manifests"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "agl" / "manifests"


@cache
def code_version() -> str:
    """Changes whenever the rules that produced a cached table may have changed."""
    import pyarrow


    h = hashlib.sha256()
    for module_file in (manifest_module.__file__, manifest_text.__file__, __file__):
        h.update(Path(module_file).read_bytes())
    h.update(f"pandas {pd.__version__.split('.')[0]} pyarrow {pyarrow.__version__.split('.')[0]}".encode())
    return h.hexdigest()[:16]


def load_manifest_cached(
    path: str | Path, *, columns: list[str] | None = None, digest: str | None = None
) -> pd.DataFrame:
    """`load_manifest(path, columns=columns)`, from the cache when these bytes were validated
    before. `digest` (the manifest's SHA-256) saves hashing the file again."""
    root = cache_root()
    path = Path(path)
    if root is None or not path.is_file():
        return load_manifest(path, columns=columns)
    digest = digest or content_hash(path)
    entry = root / f"{digest}-{code_version()}.arrow"
    frame = _read(entry, columns, path)
    if frame is not None:
        return frame
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ManifestWarning)
        full = load_manifest(path)
    messages = [str(w.message).replace(str(path), _PATH) for w in caught
                if issubclass(w.category, ManifestWarning)]
    for w in caught:  # shown once now, as load_manifest would have
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    _write(entry, full, messages)
    return _select(full, columns)


def _select(frame: pd.DataFrame, columns: list[str] | None) -> pd.DataFrame:
    if columns is None:
        return frame
    keep = set(columns) | set(REQUIRED_COLUMNS)
    return frame[[c for c in frame.columns if c in keep]]


def _read(entry: Path, columns: list[str] | None, path: Path) -> pd.DataFrame | None:
    import pyarrow as pa
    import pyarrow.feather as feather

    if not entry.exists():
        return None
    try:
        table = feather.read_table(entry, memory_map=True)
        names = table.column_names
        if columns is not None:
            keep = set(columns) | set(REQUIRED_COLUMNS)
            table = table.select([c for c in names if c in keep])
        frame = _to_pandas(table)
    except (OSError, pa.ArrowInvalid, pa.ArrowTypeError, KeyError, ValueError):
        return None  # torn or foreign: validate again and rewrite it
    meta = (table.schema.metadata or {}).get(_WARNINGS_KEY, b"")
    for message in filter(None, meta.decode("utf-8").split("\n")):
        warnings.warn(message.replace(_PATH, str(path)), ManifestWarning, stacklevel=3)
    return frame


def _to_pandas(table) -> pd.DataFrame:
    """The table as pandas. `key` is unique (validated), so pyarrow's deduplication of equal
    strings only costs time there (~4x its conversion); the other text columns repeat values
    (countries, file names) and keep it."""
    names = table.column_names
    if "key" not in names:
        return table.to_pandas()
    frame = table.drop_columns(["key"]).to_pandas()
    # Values, not a Series: the frame's index is the stored one, which a Series would align to.
    frame.insert(names.index("key"), "key", table["key"].to_numpy(zero_copy_only=False))
    return frame


def _write(entry: Path, frame: pd.DataFrame, messages: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pandas(frame, preserve_index=True)
        meta = dict(table.schema.metadata or {})
        meta[_WARNINGS_KEY] = "\n".join(m.replace("\n", " ") for m in messages).encode("utf-8")
        table = table.replace_schema_metadata(meta)
        with diskwrite.atomic_file(entry) as fh:
            feather.write_feather(table, fh, compression="uncompressed")
    except (OSError, AglError, pa.ArrowException):
        pass  # a cache that cannot be written only costs the next run the validation
