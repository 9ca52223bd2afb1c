"""Turn a model's raw reply into a Prediction, with an explicit outcome.

Models wrap their JSON in code fences or prose, leave trailing commas, use single quotes,
write numbers as strings or as "40.7° N", swap latitude and longitude, leave fields out, or
decline in words. Each outcome is a status: ok (all five place fields), partial (`missing`
names the others), refused, or unparseable. Nothing becomes a silent 0,0.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from agl.predictions.records import PLACE_FIELDS, Prediction, Status

# Values that mean "no answer" for a field. Matched case-insensitively on the whole value.
REFUSAL_VALUES = frozenset(
    {
        "", "unknown", "n/a", "na", "none", "null", "not specified", "unspecified", "unclear",
        "undetermined", "not determinable", "cannot determine", "unable to determine", "?", "-",
    }
)
# Phrases that mark a refusal in prose when no prediction could be read.
_REFUSAL_PROSE = re.compile(
    r"\b(i\s*(?:am|'m)\s*(?:not able|unable)|i\s*(?:can ?not|can't|won't|cannot)|"
    r"unable to (?:determine|identify|provide|locate)|(?:not|impossible) (?:possible )?to "
    r"(?:determine|identify|tell)|sorry|as an ai|i do not have (?:enough|sufficient)|"
    r"insufficient (?:information|evidence)|no way to (?:know|tell|determine))",
    re.IGNORECASE,
)
_KEY_ALIASES = {
    "latitude": ("latitude", "lat", "predicted_latitude"),
    "longitude": ("longitude", "lon", "lng", "long", "predicted_longitude"),
    "city": ("city", "predicted_city", "town"),
    "country": ("country", "predicted_country", "nation"),
    "continent": ("continent", "predicted_continent"),
    "reasoning": ("reasoning", "reason", "rationale", "explanation", "analysis"),
    "confidence": ("confidence", "self_confidence", "certainty"),
    "coordinates": ("coordinates", "coords", "location_coordinates"),
}
_FENCE = re.compile(r"```(?:json|JSON|javascript)?\s*(.*?)```", re.DOTALL)
_NUMBER = r"[-+]?\d+(?:\.\d+)?"
_COORD = re.compile(
    rf"^\s*([NSEWnsew])?\s*({_NUMBER})\s*(?:°|º|deg(?:rees)?)?\s*"
    rf"(?:({_NUMBER})\s*['′])?\s*(?:({_NUMBER})\s*[\"″])?\s*([NSEWnsew])?\s*$"
)


def parse_reply(sample_id: str, text: str | None, **meta: Any) -> Prediction:
    """Parse one reply. `meta` is carried onto the prediction unchanged."""
    if text is None or not text.strip():
        return Prediction(
            sample_id, Status.UNPARSEABLE, raw_reply=text, error="empty reply", meta=meta
        )
    obj = extract_object(text)
    if _place_count(obj) < len(PLACE_FIELDS):
        # Broken JSON around a complete set of "key": value pairs (a stray opening brace, a
        # wrapper key, stray trailing characters): read the pairs themselves.
        fragments = _key_values_from_fragments(text)
        if _place_count(fragments) > _place_count(obj):
            obj = fragments
    if obj is None:
        obj = _key_values_from_prose(text)
    values, notes = _read_fields(obj or {})
    reasoning = values.pop("reasoning", None)
    confidence = values.pop("confidence", None)
    place = {f: values.get(f) for f in PLACE_FIELDS}
    missing = tuple(f for f in PLACE_FIELDS if place[f] is None)
    refused_fields = notes.pop("refused", [])
    if notes:
        meta = {**meta, "parse_notes": notes}
    common = dict(raw_reply=text, reasoning=reasoning, confidence=confidence, meta=meta)
    if not missing:
        return Prediction(sample_id, Status.OK, **place, **common)
    if len(missing) < len(PLACE_FIELDS):
        refused = bool(refused_fields) and set(missing) <= set(refused_fields)
        return Prediction(
            sample_id, Status.PARTIAL, **place, missing=missing, refused=refused, **common
        )
    if refused_fields or (obj is None and _REFUSAL_PROSE.search(text)):
        return Prediction(sample_id, Status.REFUSED, refused=True, missing=missing, **common)
    why = "no JSON object or key: value fields found" if obj is None else "no usable field"
    return Prediction(sample_id, Status.UNPARSEABLE, missing=missing, error=why, **common)


# --- finding the object -------------------------------------------------------------------


def extract_object(text: str) -> dict[str, Any] | None:
    """The first JSON-like object in the text that has at least one known key."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + _braced_spans(text)
    for cand in candidates:
        obj = _loads_lenient(cand.strip())
        if isinstance(obj, list) and obj and isinstance(obj[0], dict):
            obj = obj[0]
        if isinstance(obj, dict) and _canonical_keys(obj):
            return obj
    return None


def _braced_spans(text: str) -> list[str]:
    """Top-level {...} spans, aware of quoted strings (so a '}' inside text does not close)."""
    spans, depth, start, quote, escape = [], 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = ""
            continue
        if ch == '"' and depth > 0:
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    if depth > 0 and start >= 0:  # an unclosed object at the end: a truncated reply
        spans.append(text[start:] + "}" * depth)
    return spans


def _loads_lenient(s: str) -> Any:
    attempts = [s]
    fixed = re.sub(r",\s*([}\]])", r"\1", s)  # trailing commas
    fixed = re.sub(r'("|\d|true|false|null)\s*\n(\s*")', r"\1,\n\2", fixed)  # missing commas
    attempts.append(fixed)
    for a in attempts:
        try:
            return json.loads(a)
        except json.JSONDecodeError:
            pass
    # Python-literal style: single quotes, True/None.
    py = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", fixed)))
    try:
        return ast.literal_eval(py)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None  # TypeError: `{{...}}` reads as a set holding a dict


def _key_values_from_prose(text: str) -> dict[str, Any] | None:
    """`Country: France` / `**Latitude**: 48.85` lines, when no object was given."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*[-*#\s]*\**\s*([A-Za-z_ ]{2,30}?)\s*\**\s*[:=]\s*(.+?)\s*$", line)
        if m:
            key = m.group(1).strip().lower().replace(" ", "_")
            if _canonical(key) and _canonical(key) not in out:
                out[key] = m.group(2).strip().strip("*").strip().strip('"').strip(",")
    return out if any(_canonical(k) in PLACE_FIELDS for k in out) else None


# A quoted key and its colon: `"city":` or `'city':`. A key that is not one of ours counts as
# the start of a new pair only after `{`, `,` or a line break (so `says "mind the gap": the`
# inside a reasoning text does not cut it).
_QUOTED_KEY = re.compile(r"""(^|[{,\n])?\s*(["'])([A-Za-z_][A-Za-z0-9_ -]{0,30})\2\s*:\s*""")
_CLOSING_QUOTE_AFTER = re.compile(r"""\s*(?:[,}\]]|$|\n\s*["'}])""")
_BARE_VALUE = re.compile(r"""\s*([^,}\]\n"]*)""")


def _key_values_from_fragments(text: str) -> dict[str, Any] | None:
    """Every `"key": value` pair of ours found in the text, whatever JSON is broken around
    them. A value runs to the next pair; a string value keeps its inner quotes, braces and
    colons (reasoning text is kept whole)."""
    keys = [
        m for m in _QUOTED_KEY.finditer(text)
        if _canonical(m.group(3)) or m.group(1) is not None
    ]
    out: dict[str, Any] = {}
    for i, m in enumerate(keys):
        name = _canonical(m.group(3))
        if not name or m.group(3) in out or any(_canonical(k) == name for k in out):
            continue
        last = i + 1 == len(keys)
        region = text[m.end() : len(text) if last else keys[i + 1].start()]
        out[m.group(3)] = _fragment_value(region, last)
    return out if any(_canonical(k) in PLACE_FIELDS for k in out) else None


def _fragment_value(region: str, last: bool) -> Any:
    if not region or region[0] not in "\"'":
        bare = _BARE_VALUE.match(region).group(1).strip()  # type: ignore[union-attr]
        try:
            return json.loads(bare)
        except json.JSONDecodeError:
            return bare or None
    quote = region[0]
    body = region.rstrip().rstrip(",").rstrip()
    if not last and len(body) > 1 and body.endswith(quote):
        content = body[1:-1]  # the next pair starts right after: every inner quote is text
    else:
        ends = [
            j for j in range(1, len(region))
            if region[j] == quote and _CLOSING_QUOTE_AFTER.match(region, j + 1)
        ]
        content = region[1 : ends[0]] if ends else region[1:]
    if quote == '"':
        try:
            return json.loads(f'"{content}"')
        except json.JSONDecodeError:
            return content.replace('\\"', '"').replace("\\n", "\n")
    return content


def _place_count(obj: dict[str, Any] | None) -> int:
    if not obj:
        return 0
    found = _canonical_keys(obj)
    for v in obj.values():
        if isinstance(v, dict):
            found |= _canonical_keys(v)
    if "coordinates" in found:
        found |= {"latitude", "longitude"}
    return len(found & set(PLACE_FIELDS))


def _canonical(key: str) -> str | None:
    k = str(key).strip().lower().replace("-", "_").replace(" ", "_")
    for name, aliases in _KEY_ALIASES.items():
        if k in aliases:
            return name
    return None


def _canonical_keys(obj: dict[str, Any]) -> set[str]:
    return {c for c in (_canonical(k) for k in obj) if c}


# --- reading the fields -------------------------------------------------------------------


def _read_fields(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    raw: dict[str, Any] = {}
    for k, v in obj.items():
        c = _canonical(k)
        if c and c not in raw:
            raw[c] = v
    # A nested {"location": {...}} or {"prediction": {...}} object.
    for v in obj.values():
        if isinstance(v, dict):
            for k, vv in v.items():
                c = _canonical(k)
                if c and c not in raw:
                    raw[c] = vv
    values: dict[str, Any] = {}
    notes: dict[str, Any] = {"refused": []}
    for f in ("city", "country", "continent", "reasoning"):
        v = raw.get(f)
        if v is None:
            continue
        s = str(v).strip()
        if f != "reasoning" and s.lower() in REFUSAL_VALUES:
            notes["refused"].append(f)
        elif s:
            values[f] = s
    if "coordinates" in raw and ("latitude" not in raw or "longitude" not in raw):
        pair = _coordinate_pair(raw["coordinates"])
        if pair:
            raw.setdefault("latitude", pair[0])
            raw.setdefault("longitude", pair[1])
    lat, lat_h = _coordinate(raw.get("latitude"), notes, "latitude")
    lon, lon_h = _coordinate(raw.get("longitude"), notes, "longitude")
    if lat is not None and lon is not None:
        if lat_h in "EW" and lat_h and lon_h in "NS" and lon_h:
            lat, lon = lon, lat
            notes["swapped"] = "hemisphere letters"
        elif abs(lat) > 90 and abs(lon) <= 90:
            lat, lon = lon, lat
            notes["swapped"] = "latitude out of range"
    if lat is not None and abs(lat) > 90:
        notes["out_of_range"] = notes.get("out_of_range", []) + [f"latitude {lat}"]
        lat = None
    if lon is not None and abs(lon) > 180:
        notes["out_of_range"] = notes.get("out_of_range", []) + [f"longitude {lon}"]
        lon = None
    if lat is not None and lon is not None and lat == 0 and lon == 0:
        # The authors' pipeline wrote 0,0 for "no answer"; a real 0,0 is open ocean.
        notes["refused"] += ["latitude", "longitude"]
        lat = lon = None
    if lat is not None:
        values["latitude"] = lat
    if lon is not None:
        values["longitude"] = lon
    conf = _confidence(raw.get("confidence"))
    if conf is not None:
        values["confidence"] = conf
    if not notes["refused"]:
        notes.pop("refused")
    else:
        notes["refused"] = sorted(set(notes["refused"]))
    return values, notes


def _coordinate(v: Any, notes: dict[str, Any], name: str) -> tuple[float | None, str]:
    """A coordinate and its hemisphere letter ('' if none). Refusal words are noted."""
    if v is None or isinstance(v, bool):
        return None, ""
    if isinstance(v, int | float):
        try:
            x = float(v)
        except OverflowError:  # a 400-digit integer: no coordinate, not a crash
            x = math.inf
        if not math.isfinite(x):  # NaN / Infinity / overflow: a missing value, never a number
            notes.setdefault("invalid", []).append(f"{name} {str(v)[:40]!r}")
            return None, ""
        return x, ""
    s = str(v).strip()
    if s.lower() in REFUSAL_VALUES:
        notes["refused"].append(name)
        return None, ""
    m = _COORD.match(s)
    if not m:
        notes.setdefault("invalid", []).append(f"{name} {s!r}")
        return None, ""
    pre, deg, minutes, seconds, post = m.groups()
    value = abs(float(deg)) + float(minutes or 0) / 60 + float(seconds or 0) / 3600
    if deg.startswith("-"):
        value = -value
    hemi = (pre or post or "").upper()
    if hemi in ("S", "W"):
        value = -abs(value)
    if not math.isfinite(value):
        notes.setdefault("invalid", []).append(f"{name} {s[:40]!r}")
        return None, ""
    return value, hemi


def _coordinate_pair(v: Any) -> tuple[float, float] | None:
    if isinstance(v, list | tuple) and len(v) == 2:
        try:
            return float(v[0]), float(v[1])
        except (TypeError, ValueError):
            return None
    if isinstance(v, dict):
        return None
    nums = re.findall(_NUMBER, str(v))
    return (float(nums[0]), float(nums[1])) if len(nums) == 2 else None


def _confidence(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    s = str(v).strip().rstrip("%").strip()
    try:
        x = float(s)
    except ValueError:
        word = {"low": 0.25, "medium": 0.5, "moderate": 0.5, "high": 0.75, "very high": 0.9}
        return word.get(s.lower())
    if str(v).strip().endswith("%") or 1 < x <= 100:
        x /= 100
    return x if 0 <= x <= 1 else None
