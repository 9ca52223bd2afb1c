"""JSON output that is valid JSON (NaN and infinities become null, numpy scalars plain), and
nested documents flattened to dotted keys."""

from __future__ import annotations

import json
import math
from typing import Any


def jsonable(obj: Any) -> Any:
    """`obj` with NaN and infinities as None and numpy scalars as plain Python values, recursively."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, str | bytes):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj: Any, **kw: Any) -> str:
    """`json.dumps` of `jsonable(obj)`: valid JSON always (NaN/inf are refused upstream as null)."""
    return json.dumps(jsonable(obj), allow_nan=False, **kw)


def flatten(obj: Any, prefix: str = "", *, keep_empty: bool = False) -> dict[str, Any]:
    """Nested dicts as one level of dotted keys (`ci95.country_acc.lo`). An empty nested dict
    is dropped, or kept as its own value with `keep_empty` (a diff must see `{}` appear)."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k), keep_empty=keep_empty))
        return out if out or not prefix or not keep_empty else {prefix: obj}
    return {prefix: obj}
