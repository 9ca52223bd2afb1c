"""The authors' reply parser, ported: what AGL1K's inference script (`openllm.py`,
`parse_location_response`, github.com/Rising0321/AGL1K at ab53ad0) made of a model's reply,
and so what their `analyze_new.py` scored.

Under the `paper` protocol a new run's raw replies are read by this port, so that "paper"
means the same for the authors' files and for a new model (this project's forgiving parser,
agl.predictions.parse, stays under `strict`). Their parser takes the first flat `{...}` of the
reply (no nested braces), `json.loads` it, and reads each field from the first of a list of
keys present; anything else leaves the field at its default, which their scorer then counts
as a refusal: "Unknown" for the three names, 0.0 for the coordinates (10,000 km). A reply this
project's parser recovers (a JSON object with a nested one, a broken wrapper) is a refusal
here, as it was for the authors: on their Gemini 3 Pro subset the two parsers differ by 37 km
of mean error.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The first brace-delimited text without braces inside (re.DOTALL: across lines), as theirs.
_FLAT_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)

# Their key lists, in their order (the first key present wins, even with an unusable value).
_TEXT_KEYS = {
    "city": ("city", "City", "城市", "location", "place"),
    "country": ("country", "Country", "国家", "nation"),
    "continent": ("continent", "Continent", "大洲", "洲"),
}
_COORD_KEYS = {
    "longitude": ("longitude", "Longitude", "经度", "lng", "lon"),
    "latitude": ("latitude", "Latitude", "纬度", "lat"),
}


def authors_fields(reply: Any) -> dict[str, Any]:
    """The five predicted fields (`predicted_city`, ... `predicted_latitude`) as the authors'
    parser wrote them for this reply: their defaults "Unknown" and 0.0 where it read none."""
    out: dict[str, Any] = {f"predicted_{f}": "Unknown" for f in _TEXT_KEYS}
    out.update({f"predicted_{f}": 0.0 for f in _COORD_KEYS})
    if not isinstance(reply, str):
        return out
    try:
        found = _FLAT_OBJECT.search(reply)
        if not found:
            return out
        parsed = json.loads(found.group(0))
        for field, keys in _TEXT_KEYS.items():
            key = next((k for k in keys if k in parsed), None)
            if key is not None:
                out[f"predicted_{field}"] = str(parsed[key])
        for field, keys in _COORD_KEYS.items():
            key = next((k for k in keys if k in parsed), None)
            if key is not None:
                try:
                    out[f"predicted_{field}"] = float(parsed[key])
                except (ValueError, TypeError):
                    pass
    except (json.JSONDecodeError, TypeError, RecursionError):
        # theirs: JSONDecodeError passed, any other exception printed; the fields read so far stand
        pass
    return out


# The key marking fields the port read (not a published row's): a field this run never gives
# stays "not applicable" (agl.scoring.protocol_paper), as for a run read by this project.
PORTED = "read_by_authors_parser_port"


def raw_replies(path) -> dict[str, str]:
    """Each clip's raw reply in a predictions JSONL of this project (the newest record per
    clip, as agl.predictions.records.prediction_frame keeps; clips without one left out)."""
    import orjson

    out: dict[str, str] = {}
    for line in open(path, "rb"):
        if b'"raw_reply"' not in line:
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:  # a torn last line: prediction_frame has said so
            continue
        if isinstance(rec, dict):
            reply = rec.get("raw_reply")
            if isinstance(reply, str):
                out[str(rec.get("sample_id"))] = reply
            else:
                out.pop(str(rec.get("sample_id")), None)
    return out


def with_authors_view(frame, replies: dict[str, str]):
    """The predictions frame with, for each row that has a raw reply and no authors' fields
    of its own (`original`: a published row's), the fields the authors' parser reads from
    that reply: what the `paper` protocol scores (agl.scoring.protocol_paper)."""
    if not replies:
        return frame
    originals = frame["original"].to_numpy(dtype=object).copy()
    ids = frame["sample_id"].to_numpy(dtype=object)
    for i, (sid, orig) in enumerate(zip(ids, originals, strict=True)):
        if not isinstance(orig, dict) and sid in replies:
            originals[i] = {**authors_fields(replies[sid]), PORTED: True}
    return frame.assign(original=originals)
