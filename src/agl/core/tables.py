"""Reading a table agl wrote, refusing one that is not whole.

Every CSV agl writes ends with a newline (agl.core.canonical), so a file that does not was
cut: a full disk, a killed writer, a hand edit. pandas reads such a file without a word,
its last row short or gone, and a reader would then show "21 of 32 clips" as the whole run.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from agl.errors import AglError


def read_whole_csv(path: str | Path, rerun: str, **read_csv: Any) -> Any:
    """`pandas.read_csv(path, **read_csv)`, refusing (one line, naming `rerun`: what writes
    the file again) a file that ends mid-row."""
    import pandas as pd  # heavy: only where a table is read

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AglError(f"{path}: cannot read ({exc.strerror or exc}); {rerun}") from None
    if data and not data.endswith(b"\n"):
        rows = max(data.count(b"\n") - 1, 0)
        raise AglError(f"{path}: ends mid-row ({rows} complete row(s) before the cut): a cut or "
                       f"unfinished write, not read; {rerun}")
    try:
        return pd.read_csv(io.BytesIO(data), **read_csv)
    except (ValueError, pd.errors.ParserError) as exc:
        raise AglError(f"{path}: unreadable table ({str(exc).splitlines()[0][:120]}); "
                       f"{rerun}") from None
