"""The one reader of the YAML files agl is configured by: `params.yaml`, the roster, a
`--params` file.

PyYAML's `safe_load` accepts what a configuration must not be: a key given twice (the last
one silently wins), a file of any size, nesting of any depth, aliases that expand a few lines
into a billion nodes ("billion laughs": PyYAML shares the objects, but every walk over them,
ours and DVC's, pays the expansion), bytes that are not UTF-8, and a top level that is a
list or a string. Each is refused here in one line naming the file, the line and what to do
(an `AglError`). The bounds are far above anything agl ships (params.yaml is ~30 KB, 6
levels deep, no alias) and are not params: they guard the reader of params itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agl.errors import AglError

MAX_BYTES = 4 * 1024 * 1024  # a configuration file, not data
MAX_DEPTH = 32  # nested mappings and lists
MAX_ALIASES = 64  # `*name` references in one file


class _Refused(Exception):
    def __init__(self, line: int | None, why: str):
        super().__init__(why)
        self.line, self.why = line, why


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and bounds depth and alias references."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise _Refused(mark.line + 1, f"more than {MAX_ALIASES} alias references "
                               "(*name); write the values out")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(mark.line + 1, f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:  # before `<<` merges, whose keys may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, str):  # `1:`, `yes:` (a boolean in YAML 1.1), `null:`
                    if isinstance(key_node, yaml.ScalarNode):
                        text = key_node.value[:40]
                        fix = f"quote it ('{text}': ...) or use a name"
                    else:
                        text, fix = f"a {_yaml_kind(key).removeprefix('a ')}", "use a name"
                    raise _Refused(key_node.start_mark.line + 1,
                                   f"key {text!r} is read as {_yaml_kind(key)}, not a name; {fix}")
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: SafeConstructor names it below
                    continue
                if first is not None:
                    raise _Refused(key_node.start_mark.line + 1,
                                   f"key {str(key)[:80]!r} given twice (first at line {first}); "
                                   "keep one")
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def _yaml_kind(value: Any) -> str:
    return {bool: "true/false", type(None): "null", int: "a number", float: "a number"}.get(
        type(value), f"a {type(value).__name__}")


def parse_yaml(data: bytes, source: str) -> dict[str, Any]:
    """The mapping `data` holds ({} when empty); anything else is one line naming `source`."""
    if len(data) > MAX_BYTES:
        raise AglError(f"{source}: larger than {MAX_BYTES:,} bytes, too large for a "
                       "configuration file; is it the right file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise AglError(f"{source}: line {line}: byte 0x{data[exc.start]:02x} at offset "
                       f"{exc.start} is not UTF-8; save the file as UTF-8") from None
    loader = None
    try:
        loader = _BoundedLoader(text.removeprefix("\ufeff"))  # its reader checks characters
        doc = loader.get_single_data()
    except _Refused as exc:
        raise AglError(f"{source}: line {exc.line}: {exc.why}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise AglError(f"{source}: {where}not valid YAML ({what})") from None
    except RecursionError:
        raise AglError(f"{source}: nested too deeply to read") from None
    finally:
        if loader is not None:
            loader.dispose()
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise AglError(f"{source}: the top level is a {type(doc).__name__}, not a mapping of "
                       "sections (key: value)")
    bad = [k for k in doc if not isinstance(k, str)]
    if bad:
        raise AglError(f"{source}: top-level key {bad[0]!r} is not a name")
    return doc


def load_yaml(path: str | Path, source: str | None = None) -> dict[str, Any]:
    """`parse_yaml` of the file at `path` (read bounded); a missing or unreadable file is
    one line too (FileNotFoundError is left to callers that say where to find it)."""
    path = Path(path)
    source = source or str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise AglError(f"{source}: is a folder, not a YAML file") from None
    except OSError as exc:
        raise AglError(f"{source}: cannot read ({exc.strerror or exc})") from None
    return parse_yaml(data, source)
