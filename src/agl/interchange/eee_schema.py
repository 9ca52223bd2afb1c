"""The two Every Eval Ever 0.3.0 schemas (JSON Schema draft-07, MIT, shipped unchanged in
agl/data/eee_*.schema.json with their licence) and a check that names the failing field.

The `every-eval-ever` package needs Python >= 3.12, so records are written and validated here;
the files are the package's own, byte for byte (tests compare them with the copies in
../shared). A run has thousands of instance rows: each is checked by `fastjsonschema` (the
schema compiled to Python, ~20x faster), and only a failing one goes through `jsonschema`,
whose errors name the field best.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from agl.errors import AglError

SCHEMA_VERSION = "0.3.0"
AGGREGATE = "eee_eval.schema.json"
INSTANCE = "eee_instance_level_eval.schema.json"


@cache
def schema_doc(name: str) -> dict[str, Any]:
    return json.loads((resources.files("agl") / "data" / name).read_text(encoding="utf-8"))


@cache
def validator(name: str):
    """The draft-07 reference validator for one of the two schemas (built once per process)."""
    import jsonschema  # only where records are checked

    return jsonschema.Draft7Validator(schema_doc(name))


@cache
def fast(name: str):
    """The schema compiled to a Python function (raises on the first error)."""
    import fastjsonschema  # only where records are checked

    return fastjsonschema.compile(schema_doc(name), use_default=False)  # never fill in the record


def field_path(parts: Any) -> str:
    """`evaluation_results[0].score_details.score` from a jsonschema path."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(the record)"


def _deepest(error):
    """Inside a oneOf/anyOf, the branch error that went deepest names the real field."""
    from jsonschema.exceptions import best_match

    if error.context:
        return _deepest(best_match(error.context))
    return error


def problem(record: Any, schema: str) -> str | None:
    """None where `record` passes `schema`, else one line: the field and what is wrong."""
    import fastjsonschema
    from jsonschema.exceptions import best_match

    try:
        fast(schema)(record)
        return None
    except fastjsonschema.JsonSchemaException:
        pass  # named below by the reference validator
    error = best_match(validator(schema).iter_errors(record))
    if error is None:
        return None
    error = _deepest(error)
    path = list(error.absolute_path)
    if error.validator == "required":  # name the missing field itself, not its parent
        missing = next((r for r in error.validator_value if r not in (error.instance or {})), None)
        if missing is not None:
            path.append(missing)
            return f"{field_path(path)}: required field missing"
    return f"{field_path(path)}: {error.message[:200]}"


def check(record: Any, schema: str, where: str) -> None:
    """Refuse a record that fails its schema: one line naming the file and the field."""
    line = problem(record, schema)
    if line is not None:
        raise AglError(f"{where}: {line} (EEE {SCHEMA_VERSION} schema)")
