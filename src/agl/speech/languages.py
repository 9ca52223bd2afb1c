"""A clip's languages checked where they enter: Whisper's distribution, a heard-cache entry
read back, the census's input. A language is (code, probability): the code a non-empty
string, the probability a real finite number in [0, 1] (a bool, a string such as "0.5", None,
NaN or an infinity is refused, never coerced: `float("0.5")` would make a hand-edited or torn
record look like one heard, and an infinite probability makes every country's share NaN).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from agl.errors import AglError

Languages = tuple[tuple[str, float], ...]


def bad_language(code: Any, probability: Any) -> str | None:
    """Why (code, probability) is not a language of a clip, or None when it is one."""
    if not isinstance(code, str) or not code.strip():
        return f"language code {code!r} is not a code (a non-empty string such as 'de')"
    if isinstance(probability, bool) or not isinstance(probability, int | float):
        return f"probability of {code!r} is {probability!r}, not a number"
    if not math.isfinite(probability) or not 0.0 <= probability <= 1.0:
        return f"probability of {code!r} is {probability!r}, not a finite number in [0, 1]"
    return None


def check_languages(pairs: Iterable[Any], where: str) -> Languages:
    """`pairs` as a tuple of (code, float probability), or an AglError naming `where`, the
    entry and what is wrong with it."""
    out = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise AglError(f"{where}: languages[{i}] is {pair!r}, not a (code, probability) pair")
        why = bad_language(*pair)
        if why:
            raise AglError(f"{where}: languages[{i}]: {why}")
        out.append((pair[0], float(pair[1])))
    return tuple(out)
