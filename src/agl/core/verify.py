"""Does this checkout's pipeline output match the commit? (`agl verify`, the stale-lock test)

A commit names its results by `dvc.lock`: the hash of every dependency, param and output of
every stage. After a reviewer's `agl download && dvc repro`, two things can disagree:

1. **the lock**: `dvc repro` rewrote `dvc.lock` (and `data.dvc`) with other hashes than the
   committed ones. For each stage whose outputs changed, the report names the outputs and
   what else differs in that stage's lock entry: deps (code, data, upstream outputs),
   params, the command. An output that changed while nothing else in its stage did is not
   reproducible from data, params and code (machine-dependent bytes); a code dep that
   changed names a commit that skipped the re-run (a stale lock).
2. **the workspace**: a file on disk differs from what `dvc.lock` records (edited after the
   run, or the run did not finish): DVC's own status (`dvc status`), per stage.

Everything here reads YAML and asks DVC's Python API; nothing is re-run.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agl.errors import AglError

LOCK = "dvc.lock"
DATA_PIN = "data.dvc"


@dataclass(frozen=True)
class Change:
    path: str  # a file/folder path, or a param key (dotted) for params
    committed: str | None  # a short description: "md5 1a2b3c4d, 4,039 B"; None = absent
    now: str | None


@dataclass
class StageDiff:
    stage: str
    outs: list[Change] = field(default_factory=list)
    deps: list[Change] = field(default_factory=list)
    params: list[Change] = field(default_factory=list)
    cmd_changed: bool = False

    @property
    def verdict(self) -> str:
        if not self.outs:
            return "its outputs match; its inputs changed (re-run, then commit the lock)"
        code = [c.path for c in self.deps if not c.path.startswith(("build/", "data"))]
        if code:
            return "code changed without a re-run: the committed lock is stale (run `dvc repro` and commit dvc.lock)"
        if self.deps or self.params or self.cmd_changed:
            return "its inputs differ (upstream outputs, data or params): see the first stage above"
        return (
            "same code, params and inputs, other bytes: this output is not reproducible "
            "on this machine (see README: Bit for bit)"
        )


def _describe(entry: dict[str, Any] | None) -> str | None:
    if entry is None:
        return None
    md5 = str(entry.get("md5") or entry.get("etag") or entry.get("checksum") or "?")
    size = entry.get("size")
    files = f", {entry['nfiles']} files" if entry.get("nfiles") is not None else ""
    return (
        f"md5 {md5[:8]}{'.dir' if md5.endswith('.dir') else ''}"
        + (f", {size:,} B" if isinstance(size, int) else "")
        + files
    )


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.get("md5"), a.get("size")) == (b.get("md5"), b.get("size"))


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _entries(items: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {str(e["path"]): e for e in items or []}


def compare_locks(committed: dict[str, Any], now: dict[str, Any]) -> list[StageDiff]:
    """Stage by stage (in the committed lock's order, new stages last), what differs."""
    old_stages = dict((committed or {}).get("stages") or {})
    new_stages = dict((now or {}).get("stages") or {})
    diffs = []
    for name in [*old_stages, *(s for s in new_stages if s not in old_stages)]:
        old, new = old_stages.get(name) or {}, new_stages.get(name) or {}
        d = StageDiff(name)
        for kind in ("outs", "deps"):
            a, b = _entries(old.get(kind)), _entries(new.get(kind))
            for path in [*a, *(p for p in b if p not in a)]:
                if not _same(a.get(path), b.get(path)):
                    getattr(d, kind).append(Change(path, _describe(a.get(path)), _describe(b.get(path))))
        pa, pb = _flatten(old.get("params") or {}), _flatten(new.get("params") or {})
        for key in [*pa, *(k for k in pb if k not in pa)]:
            if pa.get(key, "<absent>") != pb.get(key, "<absent>"):
                d.params.append(
                    Change(
                        key.removeprefix("params.yaml."),
                        repr(pa[key]) if key in pa else None,
                        repr(pb[key]) if key in pb else None,
                    )
                )
        d.cmd_changed = old.get("cmd") != new.get("cmd")
        if not old or not new:
            d.outs = d.outs or [Change("(stage)", "present" if old else None, "present" if new else None)]
        if d.outs or d.deps or d.params or d.cmd_changed:
            diffs.append(d)
    return diffs


def compare_pins(committed: dict[str, Any] | None, now: dict[str, Any] | None) -> list[Change]:
    """The data pin (`data.dvc`): its outs, as for a stage."""
    a, b = _entries((committed or {}).get("outs")), _entries((now or {}).get("outs"))
    return [
        Change(p, _describe(a.get(p)), _describe(b.get(p)))
        for p in [*a, *(p for p in b if p not in a)]
        if not _same(a.get(p), b.get(p))
    ]


def committed_text(root: Path, path: str, rev: str = "HEAD") -> str | None:
    """`path` as committed at `rev` (None when the commit has no such file)."""
    r = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        if "exists on disk, but not in" in r.stderr or "does not exist in" in r.stderr:
            return None
        raise AglError(f"git show {rev}:{path} failed in {root}: {r.stderr.strip()}")
    return r.stdout


def workspace_status(root: Path) -> dict[str, dict[str, dict[str, str]]]:
    """{stage: {"outs"|"deps": {path: "modified" | "not in cache" | "deleted" ...}}} where
    the files on disk differ from dvc.lock (DVC's `status`, through its Python API)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        status = repo.status()
    out: dict[str, dict[str, dict[str, str]]] = {}
    for stage, items in status.items():
        found: dict[str, dict[str, str]] = {}
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                for what, changes in item.items():
                    if isinstance(changes, dict):
                        kind = what.removeprefix("changed ")
                        found.setdefault(kind, {}).update({str(p): str(s) for p, s in changes.items()})
            else:
                found.setdefault("stage", {})[str(item)] = "changed"
        if found:
            out[str(stage)] = found
    return out


@dataclass
class Verdict:
    rev: str
    stages: int
    outputs: int
    lock: list[StageDiff]
    pin: list[Change]
    workspace: dict[str, dict[str, dict[str, str]]]

    @property
    def ok(self) -> bool:
        return not (self.lock or self.pin or self.workspace)


def verify(root: str | Path = ".", rev: str = "HEAD", *, status: bool = True) -> Verdict:
    """Compare this checkout's `dvc.lock` and files on disk with the lock committed at `rev`; the
    verdict names each stage's differing outputs, deps, params and command."""
    root = Path(root)
    lock_path = root / LOCK
    if not lock_path.exists():
        raise AglError(f"{lock_path}: no dvc.lock; run `agl download && dvc repro` first")
    now = yaml.safe_load(lock_path.read_text(encoding="utf-8")) or {}
    text = committed_text(root, LOCK, rev)
    if text is None:
        raise AglError(f"{rev} has no committed {LOCK}: nothing to verify against")
    committed = yaml.safe_load(text) or {}
    pin_text = committed_text(root, DATA_PIN, rev)
    pin_now = root / DATA_PIN
    pin = compare_pins(
        yaml.safe_load(pin_text) if pin_text else None,
        yaml.safe_load(pin_now.read_text()) if pin_now.exists() else None,
    )
    stages = committed.get("stages") or {}
    return Verdict(
        rev=rev,
        stages=len(stages),
        outputs=sum(len(s.get("outs") or []) for s in stages.values()),
        lock=compare_locks(committed, now),
        pin=pin,
        workspace=workspace_status(root) if status else {},
    )


def render(v: Verdict) -> str:
    """One screen: the verdict first, then each stage that differs."""
    if v.ok:
        return (
            f"agl verify: OK: all {v.outputs} output(s) of {v.stages} stage(s) match "
            f"dvc.lock as committed at {v.rev}, and the files on disk match dvc.lock."
        )
    lines = [
        f"agl verify: MISMATCH against dvc.lock as committed at {v.rev} ({v.stages} stage(s), {v.outputs} output(s))"
    ]
    if v.pin:
        lines.append("data.dvc (the data pin): this machine's `agl download` made other bytes")
        lines += [f"  {c.path}: committed {c.committed}, now {c.now}" for c in v.pin]
    for d in v.lock:
        lines.append(f"stage {d.stage}: {d.verdict}")
        for c in d.outs:
            lines.append(f"  output {c.path}: committed {c.committed}, now {c.now}")
        for c in d.deps:
            lines.append(f"  dep    {c.path}: committed {c.committed}, now {c.now}")
        for c in d.params:
            lines.append(f"  param  {c.path}: committed {c.committed}, now {c.now}")
        if d.cmd_changed:
            lines.append("  cmd    changed")
    for stage, found in v.workspace.items():
        outs = ", ".join(f"{p} ({s})" for p, s in found.get("outs", {}).items())
        deps = ", ".join(f"{p} ({s})" for p, s in found.get("deps", {}).items())
        lines.append(
            f"stage {stage}: files on disk differ from dvc.lock"
            + (f"; outputs {outs}" if outs else "")
            + (f"; deps {deps}" if deps else "")
            + (f"; {', '.join(found['stage'])}" if found.get("stage") else "")
        )
    if v.workspace:
        lines.append("  (run `dvc repro` to bring them in line, or `dvc checkout` to restore outputs)")
    return "\n".join(lines)
