"""Does this checkout's pipeline output match the commit? (`agl verify`, the stale-lock test)

A commit names its results by `dvc.lock`: the hash of every dependency, param and output of
every stage. After a reviewer's `agl download && dvc repro`, two things can disagree:

1. **the lock**: `dvc repro` rewrote `dvc.lock` (and `data.dvc`) with other hashes than the
   committed ones. For each stage whose outputs changed, the report names the outputs and
   what else differs in that stage's lock entry: deps (code, data, upstream outputs),
   params, the command. An output that changed while nothing else in its stage did is not
   reproducible from data, params and code: either it records run history (what this
   session requested or took from a cache) or the machine made other bytes; both versions
   are read from DVC's cache and their differing keys tell which (`agl.verify.history`). A
   code dep that changed names a commit that skipped the re-run (a stale lock).
2. **the workspace**: a file on disk differs from what `dvc.lock` records (edited after the
   run, or the run did not finish): DVC's own status (`dvc status`), per stage.

Before any of that, a checkout where nothing has run yet (no `data/`, or no stage output on
disk: a fresh clone) gets one line saying what to run, not a mismatch per stage.

Everything here reads YAML and asks DVC's Python API; nothing is re-run.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agl.core.dvc_busy import dvc_lock_is_one_line
from agl.core.jsonutil import flatten
from agl.errors import AglError
from agl.verify.history import OutputCause, classify_outputs

LOCK = "dvc.lock"
DATA_PIN = "data.dvc"


@dataclass(frozen=True)
class Change:
    path: str  # a file/folder path, or a param key (dotted) for params
    committed: str | None  # a short description: "md5 1a2b3c4d, 4,039 B"; None = absent
    now: str | None
    committed_oid: str | None = None  # the md5 itself (outputs), to read it from DVC's cache
    now_oid: str | None = None


@dataclass
class StageDiff:
    stage: str
    outs: list[Change] = field(default_factory=list)
    deps: list[Change] = field(default_factory=list)
    params: list[Change] = field(default_factory=list)
    cmd_changed: bool = False
    causes: list[OutputCause] = field(default_factory=list)  # same inputs: why each output differs

    @property
    def same_inputs(self) -> bool:
        return bool(self.outs) and not (self.deps or self.params or self.cmd_changed)

    @property
    def verdict(self) -> str:
        if not self.outs:
            return "its outputs match; its inputs changed (re-run, then commit the lock)"
        code = [c.path for c in self.deps if not c.path.startswith(("build/", "data"))]
        if code:
            return "code changed without a re-run: the committed lock is stale (run `dvc repro` and commit dvc.lock)"
        if not self.same_inputs:
            return "its inputs differ (upstream outputs, data or params): see the first stage above"
        kinds = {c.cause for c in self.causes}
        if kinds == {"run history"}:
            return (
                "same code, params and inputs; the output depends on run history (what this "
                "session requested or took from a cache, which a rerun changes): a bug in the "
                "stage, which must write those values to <output>.timings.json "
                "(docs/bit-for-bit.md)"
            )
        if "machine" in kinds:
            return (
                "same code, params and inputs, other bytes: not reproducible on this machine, "
                "or edited after the run (`dvc repro -f` of this stage derives it again: an "
                "edited record does not survive, docs/inference.md) (docs/bit-for-bit.md)"
            )
        return (
            "same code, params and inputs, other bytes: not reproducible on this machine, or "
            "dependent on run history (the committed version is not in DVC's cache to tell: "
            "`dvc pull` it, then run `agl verify` again)"
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


def _oid(entry: dict[str, Any] | None) -> str | None:
    return str(entry["md5"]) if entry and entry.get("md5") else None


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.get("md5"), a.get("size")) == (b.get("md5"), b.get("size"))


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
                    getattr(d, kind).append(Change(path, _describe(a.get(path)), _describe(b.get(path)),
                                                   _oid(a.get(path)), _oid(b.get(path))))
        pa, pb = flatten(old.get("params") or {}), flatten(new.get("params") or {})
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

    with dvc_lock_is_one_line(root, "agl verify"), Repo(str(root)) as repo:  # `dvc repro` may hold it
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
    # A folder dep (a code package: `src/agl/core`) that differs: the files in it that differ
    # from `rev` (git's view), since DVC names only the folder.
    dep_files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lock or self.pin or self.workspace)


def not_run_yet(root: Path, committed: dict[str, Any]) -> str | None:
    """One line for a checkout where nothing has run (a fresh clone): what to run first."""
    pin = root / DATA_PIN
    data = [str(o["path"]) for o in (yaml.safe_load(pin.read_text()) or {}).get("outs") or []] \
        if pin.exists() else []
    if data and not any((root / d).exists() for d in data):
        return (f"nothing to verify yet: {', '.join(d + '/' for d in data)} is missing; run "
                "`agl download && dvc repro` first (or `dvc pull` from a DVC remote)")
    outs = [str(o["path"]) for s in (committed.get("stages") or {}).values() for o in s.get("outs") or []]
    if outs and not any((root / o).exists() for o in outs):
        return (f"nothing to verify yet: none of the {len(outs)} pipeline outputs is on disk; "
                "run `dvc repro` first (or `dvc pull` from a DVC remote)")
    return None


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
    empty = not_run_yet(root, committed)
    if empty:
        raise NotRunYet(empty)
    pin_text = committed_text(root, DATA_PIN, rev)
    pin_now = root / DATA_PIN
    pin = compare_pins(
        yaml.safe_load(pin_text) if pin_text else None,
        yaml.safe_load(pin_now.read_text()) if pin_now.exists() else None,
    )
    stages = committed.get("stages") or {}
    lock = compare_locks(committed, now)
    suspects = [d for d in lock if d.same_inputs]
    if suspects:
        changes = [(c.path, c.committed_oid, c.now_oid) for d in suspects for c in d.outs]
        causes = iter(classify_outputs(root, changes, rev))
        for d in suspects:
            d.causes = [next(causes) for _ in d.outs]
    workspace = workspace_status(root) if status else {}
    folders = {c.path for d in lock for c in d.deps} | {p for f in workspace.values() for p in f.get("deps", {})}
    return Verdict(
        rev=rev,
        stages=len(stages),
        outputs=sum(len(s.get("outs") or []) for s in stages.values()),
        lock=lock,
        pin=pin,
        workspace=workspace,
        dep_files={p: changed_files(root, rev, p) for p in sorted(folders) if (root / p).is_dir()},
    )


def changed_files(root: Path, rev: str, folder: str) -> list[str]:
    """The files under `folder` that differ from `rev`, or are new and not ignored (git)."""
    def git(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
        return done.stdout.splitlines() if done.returncode == 0 else []

    return sorted(set(git("diff", "--name-only", rev, "--", folder))
                  | set(git("ls-files", "--others", "--exclude-standard", "--", folder)))


class NotRunYet(AglError):
    """Nothing in this checkout to compare yet (a fresh clone): the message says what to run."""


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
        causes = {c.path: c for c in d.causes}
        for c in d.outs:
            lines.append(f"  output {c.path}: committed {c.committed}, now {c.now}")
            cause = causes.get(c.path)
            if cause and cause.keys:
                lines.append(f"         {cause.cause}: {', '.join(cause.keys)} differ")
        for c in d.deps:
            lines.append(f"  dep    {c.path}: committed {c.committed}, now {c.now}")
            if v.dep_files.get(c.path):
                lines.append(f"         changed in it: {_some(v.dep_files[c.path])}")
        for c in d.params:
            lines.append(f"  param  {c.path}: committed {c.committed}, now {c.now}")
        if d.cmd_changed:
            lines.append("  cmd    changed")
    for stage, found in v.workspace.items():
        outs = ", ".join(f"{p} ({s})" for p, s in found.get("outs", {}).items())
        deps = ", ".join(f"{p} ({s})" for p, s in found.get("deps", {}).items())
        inside = [f for p in found.get("deps", {}) for f in v.dep_files.get(p, [])]
        lines.append(
            f"stage {stage}: files on disk differ from dvc.lock"
            + (f"; outputs {outs}" if outs else "")
            + (f"; deps {deps}" if deps else "")
            + (f" (changed in it: {_some(inside)})" if inside else "")
            + (f"; {', '.join(found['stage'])}" if found.get("stage") else "")
        )
    if v.workspace:
        lines.append("  (run `dvc repro` to bring them in line, or `dvc checkout` to restore outputs)")
    return "\n".join(lines)


def _some(files: list[str], n: int = 5) -> str:
    return ", ".join(files[:n]) + (f" and {len(files) - n} more" if len(files) > n else "")
