"""Run history or machine? Why an output differs from the committed lock with the same inputs.

When `agl verify` finds an output whose bytes differ from `dvc.lock` as committed while its
stage's code, params and inputs are the same, there are two causes with different remedies:

* **run history**: the output records what happened in this session (requests made, replies
  taken from the cache, an estimate of what was still to do), so an ordinary rerun (`dvc
  repro -f`, a param changed and changed back, a resumed run) rewrites it. A bug in the stage:
  those values belong in the `<output>.timings.json` beside it (`agl.core.canonical.write_timings`),
  which DVC ignores;
* **the machine**: the same computation gives other digits here (a library build, a CPU's
  SIMD path): see docs/bit-for-bit.md.

The two are told apart by content, not by guessing from the stage: both versions of the
output are read from DVC's cache (a stage's outputs are cached on every run, so after
`dvc repro -f` the committed version is still there; `dvc pull` fetches it otherwise), the
JSON / JSON Lines keys whose values differ are listed, and when every one of them names a
run-history quantity (`RUN_HISTORY_KEYS`, at any depth) the verdict is run history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl.core.dvc_busy import dvc_lock_is_one_line
from agl.core.jsonutil import flatten

# Names whose values say what one session did, not what data, params and code decide.
RUN_HISTORY_KEYS = frozenset({
    "session_requests", "session_cache_hits", "session_cost_usd", "cached", "cache_hits",
    "attempts", "requests", "estimate", "estimate_before_run", "latency_s", "wall_s",
    "submitted_at", "x_real_time", "listen_s", "invert_s",
})


@dataclass
class OutputCause:
    path: str
    cause: str  # "run history" | "machine" | "unknown"
    keys: list[str] = field(default_factory=list)  # differing keys (dotted), a few
    files: list[str] = field(default_factory=list)  # for a folder: the files that differ


def _cache_path(repo: Any, oid: str) -> Path | None:
    try:
        path = Path(repo.cache.local.oid_to_path(oid))
    except Exception:  # an odd oid or cache layout: cannot tell
        return None
    return path if path.exists() else None


def _read(repo: Any, oid: str | None) -> bytes | None:
    if not oid:
        return None
    path = _cache_path(repo, oid)
    return path.read_bytes() if path else None


def _parse(data: bytes) -> dict[str, Any] | None:
    """A JSON document, or JSON Lines keyed by each record's id; None if neither."""
    text = data.decode("utf-8", "replace")
    try:
        return flatten(json.loads(text), keep_empty=True)
    except json.JSONDecodeError:
        pass
    out: dict[str, Any] = {}
    try:
        for i, line in enumerate(t for t in text.splitlines() if t.strip()):
            rec = json.loads(line)
            rid = rec.get("sample_id") or rec.get("key") or i if isinstance(rec, dict) else i
            out.update(flatten(rec, str(rid), keep_empty=True))
    except (json.JSONDecodeError, AttributeError):
        return None
    return out


def differing_keys(old: bytes, new: bytes) -> list[str] | None:
    """The dotted keys whose values differ between two JSON / JSON Lines texts (None when
    either is not JSON: a CSV, a binary)."""
    a, b = _parse(old), _parse(new)
    if a is None or b is None:
        return None
    return sorted(k for k in a.keys() | b.keys() if a.get(k, object) != b.get(k, object))


def is_run_history(key: str) -> bool:
    return any(part in RUN_HISTORY_KEYS for part in key.split("."))


def _dir_entries(repo: Any, oid: str) -> dict[str, str] | None:
    data = _read(repo, oid)
    if data is None:
        return None
    try:
        return {e["relpath"]: e["md5"] for e in json.loads(data)}
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def classify(repo: Any, path: str, old_oid: str | None, new_oid: str | None,
             committed: Any = None) -> OutputCause:
    """Why output `path` went from `old_oid` (the committed lock) to `new_oid` (now).

    `committed(path)` gives the committed bytes of an output DVC does not cache (a headline
    file tracked in git) when the cache lacks them; the current bytes are then on disk."""
    pairs: list[tuple[str, str | None, str | None]]
    if (old_oid or "").endswith(".dir") and (new_oid or "").endswith(".dir"):
        a, b = _dir_entries(repo, old_oid), _dir_entries(repo, new_oid)
        if a is None or b is None:
            return OutputCause(path, "unknown")
        pairs = [(f"{path}/{r}", a.get(r), b.get(r)) for r in sorted(a.keys() | b.keys())
                 if a.get(r) != b.get(r)]
    else:
        pairs = [(path, old_oid, new_oid)]
    keys: list[str] = []
    for name, x, y in pairs:
        old, new = _read(repo, x), _read(repo, y)
        if old is None and committed is not None and name == path:
            old = committed(path)
        if new is None and name == path and Path(repo.root_dir, path).is_file():
            new = Path(repo.root_dir, path).read_bytes()
        if old is None or new is None:
            return OutputCause(path, "unknown", files=[p for p, _, _ in pairs])
        diff = differing_keys(old, new)
        if diff is None or not diff:  # not JSON, or only formatting: the bytes themselves
            return OutputCause(path, "machine", files=[p for p, _, _ in pairs])
        keys += [f"{name}:{k}" if name != path else k for k in diff]
    files = [p for p, _, _ in pairs] if len(pairs) > 1 or pairs[0][0] != path else []
    cause = "run history" if all(is_run_history(k.split(":")[-1]) for k in keys) else "machine"
    if cause == "machine":  # name the keys that are not run history: those are the problem
        keys = [k for k in keys if not is_run_history(k.split(":")[-1])]
    return OutputCause(path, cause, keys[:6], files)


def classify_outputs(root: Path, changes: list[tuple[str, str | None, str | None]],
                     rev: str = "HEAD") -> list[OutputCause]:
    """`classify` for each (path, committed oid, current oid), through DVC's cache (or git,
    for an output tracked there)."""
    import subprocess

    from dvc.repo import Repo

    def committed(path: str) -> bytes | None:
        r = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, capture_output=True)
        return r.stdout if r.returncode == 0 else None

    with dvc_lock_is_one_line(root, "agl verify"), Repo(str(root)) as repo:  # `dvc repro` may hold it
        return [classify(repo, p, a, b, committed) for p, a, b in changes]
