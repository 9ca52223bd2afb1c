"""Canonical bytes for every DVC-tracked output: the one place that states float precision.

A DVC-tracked output must be a function of data, params and code alone, so that a fresh
clone on another machine reproduces the hashes in `dvc.lock`. Full-precision floats are not:
their last digits follow the CPU's SIMD paths, BLAS/FFT builds and thread counts. Every
writer of a tracked output therefore goes through this module:

* floats are rounded to the precision of their *quantity* (`PRECISION`, decimals), far
  coarser than machine noise (float64: ~1e-15 relative; audio measures from float32
  samples: ~1e-7) and finer than any number a reader or a downstream stage uses;
* the quantity of a value is read from its column or key name (`quantity_of`); a name that
  matches no rule gets `DEFAULT_SIGNIFICANT` significant digits;
* JSON: keys sorted, NaN/inf written as null (`allow_nan=False` proves none slipped
  through), numpy scalars as plain numbers, UTF-8, "\\n" line endings, a final newline;
* CSV: the caller's row order (stages produce rows in manifest order or a documented sort),
  "\\n" line endings, `-0.0` written as `0.0`;
* no timings, durations of a run, timestamps, hosts, absolute paths, pids or library
  versions: those go to MLflow or to a `*.timings.json` file beside the output, which
  `.dvcignore` keeps out of every hash (`write_timings`);
* no secret: every text written here is scrubbed (`agl.core.secrets`: known keys, and the
  credentials of any URL) — the object before JSON escaping, the text before writing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agl.core.diskwrite import replace_atomically
from agl.core.jsonutil import jsonable
from agl.core.secrets import scrub, scrub_text

# Decimals per quantity. Why each: the finest difference anything downstream reads, with
# orders of magnitude to spare, and far above the noise of the machine that computed it.
PRECISION: dict[str, int] = {
    # distances: 1 mm. Not 3: the paper's and the leaderboard's 2 decimals would then be a
    # double rounding (Qwen2.5-Omni's 5476.834787 km -> 5476.835 -> "5476.84", not 5476.83).
    "km": 6,
    "degrees": 6,  # coordinates: ~0.1 m on the ground
    "dbfs": 3,  # audio levels: 0.001 dB (thresholds are whole dB)
    "seconds": 3,  # audio durations and speech seconds: 1 ms
    "share": 6,  # probabilities, accuracies, rates, ratios, p-values, tag scores in [0, 1]
    "measure": 4,  # audio descriptors from float32 samples (flatness, ACI): 1e-4 absolute
    "points": 3,  # GeoScore (0..5000 points)
    "usd": 6,  # cost
    "similarity": 6,  # cosine similarities
}
# A subtree written exactly as given (only NaN/inf -> null): `quantities={"original": EXACT}`.
EXACT = "exact"
# A float whose name matches no rule (weights, coefficients, z-scores, totals).
DEFAULT_SIGNIFICANT = 10

# (regex on a lower-cased column/key name, quantity); the first match wins.
_RULES: tuple[tuple[str, str | None], ...] = (
    (r"odds|coef", None),  # unbounded ratios and log-odds: significant digits, not decimals
    (r"(^|_)km($|_)|_km_|distance|error_cap", "km"),
    (r"(^|_)(lat|lon|latitude|longitude)($|_)", "degrees"),
    (r"dbfs|(^|_)db($|_)", "dbfs"),
    (r"seconds|(^|_)duration|_s$", "seconds"),
    (r"flatness|(^|_)aci($|_)", "measure"),
    (r"geoscore|(^|_)points($|_)", "points"),
    (r"usd|cost", "usd"),
    (r"cosine|similarity", "similarity"),
    (
        r"acc|rate|share|ratio|fraction|prob|p_value|(^|_)p($|_)|within|confidence|rho|"
        r"alpha|ece|(^|_)hit",
        "share",
    ),
)


def quantity_of(name: str | None) -> str | None:
    """The quantity a column or key name stands for (None: default significant digits)."""
    low = (name or "").lower()
    for pattern, quantity in _RULES:
        if re.search(pattern, low):
            return quantity
    return None


def round_value(x: float, quantity: str | None) -> float:
    """`x` at its quantity's precision; formatting with a fixed number of digits rounds the
    exact binary value correctly on every platform (Python's own dtoa), unlike x*10**d."""
    if not math.isfinite(x):
        return x
    if quantity is None:
        y = float(f"{x:.{DEFAULT_SIGNIFICANT}g}")
    else:
        y = float(f"{x:.{PRECISION[quantity]}f}")
    return 0.0 if y == 0 else y  # no -0.0


def canonical(obj: Any, quantity: str | None = None, *, quantities: Mapping[str, str | None] | None = None) -> Any:
    """A JSON-ready copy of `obj`: floats rounded by the quantity of their key (a list
    inherits its key's), NaN/inf as None, numpy scalars and arrays plain, tuples as lists.
    `quantities` overrides the name rules for given keys."""
    if quantity == EXACT:  # kept verbatim (e.g. an authors' published fields)

        return jsonable(obj)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            key = str(k)
            q = quantities[key] if quantities and key in quantities else quantity_of(key) or quantity
            out[key] = canonical(v, q, quantities=quantities)
        return out
    if isinstance(obj, list | tuple):
        return [canonical(v, quantity, quantities=quantities) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, str | bytes):  # numpy scalar or array
        return canonical(obj.tolist(), quantity, quantities=quantities)
    if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
        return obj
    if isinstance(obj, float):
        return round_value(obj, quantity) if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return obj.as_posix()
    return obj


def dumps(obj: Any, *, indent: int | None = 1, quantities: Mapping[str, str | None] | None = None) -> str:
    """Canonical JSON text (no trailing newline), scrubbed of secrets."""
    return json.dumps(
        canonical(scrub(obj), quantities=quantities),
        indent=indent,
        sort_keys=True,
        allow_nan=False,
        ensure_ascii=False,
        separators=(",", ": ") if indent is not None else (",", ":"),
    )


def write_json(path: str | Path, obj: Any, *, quantities: Mapping[str, str | None] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_text(path, dumps(obj, quantities=quantities) + "\n")
    return path


def jsonl_line(obj: Any, *, quantities: Mapping[str, str | None] | None = None) -> str:
    """One canonical JSON Lines record, with its newline."""
    return dumps(obj, indent=None, quantities=quantities) + "\n"


def round_frame(frame, quantities: Mapping[str, str | None] | None = None, default: str | None = None):
    """A copy of a DataFrame with every float column rounded by its column's quantity
    (`quantities` overrides; `default` for names no rule matches)."""
    import pandas as pd

    out = frame.copy()
    for col in out.columns:
        series = out[col]
        name = str(col)
        q = quantities[name] if quantities and name in quantities else quantity_of(name) or default
        if pd.api.types.is_float_dtype(series.dtype):
            out[col] = [round_value(float(v), q) for v in series.to_numpy()]
            out[col] = out[col].astype(series.dtype)
        elif series.dtype == object:
            out[col] = [round_value(v, q) if isinstance(v, float) else v for v in series]
    return out


def write_csv(
    frame,
    path: str | Path,
    *,
    index: bool = False,
    quantities: Mapping[str, str | None] | None = None,
    default: str | None = None,
    sort_by: str | list[str] | None = None,
) -> Path:
    """A DataFrame as canonical CSV: floats at their quantity's precision, "\\n" endings,
    rows in the given order (or stably sorted by `sort_by`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if sort_by is not None:
        frame = frame.sort_values(sort_by, kind="stable")
    text = round_frame(frame, quantities, default).to_csv(index=index, lineterminator="\n")
    _write_text(path, text)
    return path


def _write_text(path: Path, text: str) -> None:
    text = scrub_text(text)  # CSV cells, timings: whatever the object held
    # Bytes keep "\n" on every OS; written whole, then renamed, so no reader sees half (a
    # full disk is one line and leaves the old file: agl.core.diskwrite).
    replace_atomically(path, text.encode("utf-8"))


# --- What does not belong in a tracked output -------------------------------------------

TIMINGS_SUFFIX = ".timings.json"  # .dvcignore: `*.timings.json`


def timings_path(output: str | Path) -> Path:
    """Where the timings of the stage that wrote `output` go: beside it, ignored by DVC."""
    output = Path(output)
    return output.with_name(output.stem + TIMINGS_SUFFIX)


def write_timings(output: str | Path, timings: Mapping[str, Any]) -> Path:
    """Wall times, latencies, throughput, request/cache counts of this session: useful, but
    machine- and history-dependent, so kept out of DVC's hashes (not canonicalised)."""
    path = timings_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_text(path, json.dumps(canonical(scrub(dict(timings)), None), indent=1, sort_keys=True,
                                 default=str) + "\n")
    return path


def split(doc: Mapping[str, Any], volatile: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the reproducible part, the volatile part) of a flat summary dict."""
    volatile = set(volatile)
    return ({k: v for k, v in doc.items() if k not in volatile}, {k: v for k, v in doc.items() if k in volatile})
