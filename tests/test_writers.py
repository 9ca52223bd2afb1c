# ruff: noqa: F811  (pytest fixtures imported from test_eee are parameters here)
"""Every file agl writes goes one way (agl.core.diskwrite): a temporary beside the target,
opened O_NOFOLLOW|O_EXCL, synced and renamed over the final name (issue 49).

The writers are found by searching the source, not listed by hand: every call that can write a
file (open for writing, os.open with write flags, Path.write_text/write_bytes, os.replace,
rename, shutil copies, a library writer handed a path: savefig, to_csv, np.save, json.dump,
write_feather, ...) in src/ and stages/ must be inside agl.core.diskwrite or agl.core.nofollow,
or hand the library a file object from `diskwrite.atomic_file` (or a no-follow `open_part`).
The few that write otherwise are named below with why (appends, resumable downloads, a private
temporary folder); a new one fails this test until it goes through diskwrite or is argued for
here. Then links are planted at the outputs of the one way and of the writers the fifth
hostile pass caught following them (export, leaderboard, import, MLflow's store).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from test_eee import record, synthetic  # noqa: F401  (module fixtures, shared)

from agl.cli import main
from agl.core import canonical, diskwrite

REPO = Path(__file__).resolve().parents[1]
WRITE_MODE = set("wax+")
LIB_WRITERS = {"savefig", "to_csv", "to_parquet", "to_feather", "to_pickle", "to_json", "save",
               "savez", "savez_compressed", "write_feather", "write_table", "dump"}
FS_CALLS = {("os", "replace"), ("os", "rename"), ("os", "fdopen"), ("os", "link"), ("os", "symlink"),
            ("os", "truncate"), ("os", "write"), ("os", "ftruncate"), ("shutil", "copy"),
            ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "move"), ("shutil", "copytree"),
            ("sf", "write"), ("soundfile", "write")}
THE_ONE_WAY = {"src/agl/core/diskwrite.py", "src/agl/core/nofollow.py"}
# (file, function): why it writes another way. Each must still be found (no stale entry).
ARGUED = {
    ("src/agl/cli.py", "main"): "os.devnull opened to silence a closed stdout",
    ("src/agl/core/single_writer.py", "_flock"): "truncates the lock file it opened no-follow",
    ("src/agl/predictions/records.py", "__init__"):
        "PredictionWriter appends records (a resumable run), inside its run folder (paths.inside)",
    ("src/agl/predictions/records.py", "_append"): "the append itself, cut back on a failed write",
    ("src/agl/predictions/records.py", "_drop_torn_tail"): "cuts a killed writer's torn last line",
    ("src/agl/dataset/download.py", "_one"):
        "a resumable .part (opened no-follow by open_part) renamed into place once verified",
    ("src/agl/dataset/shared_data.py", "_one"): "a verified .part (open_part) renamed into place",
    ("src/agl/core/tracking.py", "_create_store"):
        "links a whole new MLflow store into place (os.link: never over one made meanwhile)",
    ("src/agl/dataset/manifest.py", "write_manifest"): "to a file object its caller opened no-follow",
    ("src/agl/explore/export.py", "_place"): "links/copies audio into its private mkdtemp folder",
    ("src/agl/explore/export.py", "export"): "swaps the finished private mkdtemp folder into place",
}


def _safe_names(tree: ast.AST) -> set[str]:
    """Names bound to a file object agl made safely: `with diskwrite.atomic_file(...) as NAME`,
    `with open_part(...) as NAME`, or an in-memory `NAME = io.BytesIO()`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            for item in node.items:
                c = item.context_expr
                if isinstance(c, ast.Call) and isinstance(item.optional_vars, ast.Name):
                    f = c.func
                    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                    if name in ("atomic_file", "open_part"):
                        out.add(item.optional_vars.id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and ast.unparse(node.value.func) in ("io.BytesIO", "BytesIO", "io.StringIO"):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out | {"sys.stdout", "sys.stderr"}


def _target(node: ast.Call, attr: str, base: str | None) -> ast.AST | None:
    if attr == "write_table" and base not in ("pq", "parquet", "feather", "orc", "pacsv", "csv"):
        return None  # the project's own write_table functions (they write through diskwrite)
    if attr == "dump" and base == "json" or attr in ("write_feather", "write_table"):
        return node.args[1] if len(node.args) > 1 else None
    if attr == "save" and base not in ("np", "numpy"):
        return None
    if node.args:
        return node.args[0]
    return next((k.value for k in node.keywords
                 if k.arg in ("path_or_buf", "fname", "file", "dest", "fp", "where")), None)


def writes(path: Path):
    """(function, what, line) for every call in `path` that can write a file another way."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    safe = _safe_names(tree)
    owner = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in ast.walk(fn):
                owner[id(sub)] = fn.name  # the innermost function wins (walked last)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f, what = node.func, None
        if isinstance(f, ast.Name) and f.id == "open":
            mode = node.args[1] if len(node.args) > 1 else \
                next((k.value for k in node.keywords if k.arg == "mode"), None)
            if mode is not None and not (isinstance(mode, ast.Constant) and not set(str(mode.value)) & WRITE_MODE):
                what = "open for writing"
        elif isinstance(f, ast.Attribute):
            base = f.value.id if isinstance(f.value, ast.Name) else None
            if f.attr in ("write_text", "write_bytes") and base != "diskwrite":
                what = f"Path.{f.attr}"
            elif (base, f.attr) in FS_CALLS:
                target = node.args[0] if node.args else None
                if not (f.attr == "write" and isinstance(target, ast.Name) and target.id in safe):
                    what = f"{base}.{f.attr}"
            elif base == "os" and f.attr == "open":
                flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
                if any(x in flags for x in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC")):
                    what = "os.open for writing"
            elif f.attr in ("touch", "symlink_to", "hardlink_to") or (
                    f.attr == "rename" and len(node.args) == 1 and not node.keywords):  # not a DataFrame's
                what = f".{f.attr}"
            elif f.attr in LIB_WRITERS:
                target = _target(node, f.attr, base)
                if target is not None and ast.unparse(target) not in safe:
                    what = f"{ast.unparse(f)}(<a path>)"
        if what:
            yield owner.get(id(node), "<module>"), what, node.lineno


def _sources() -> list[Path]:
    return sorted([*(REPO / "src").rglob("*.py"), *(REPO / "stages").rglob("*.py")])


def test_every_writer_found_in_the_source_goes_through_diskwrite():
    found, unargued = set(), []
    for path in _sources():
        rel = path.relative_to(REPO).as_posix()
        if rel in THE_ONE_WAY:
            continue
        for fn, what, line in writes(path):
            found.add((rel, fn))
            if (rel, fn) not in ARGUED:
                unargued.append(f"{rel}:{line} {fn}: {what}")
    assert not unargued, ("write through agl.core.diskwrite (write_text, write_bytes, atomic_file), "
                          "or argue for it in ARGUED:\n" + "\n".join(unargued))
    assert set(ARGUED) <= found, f"stale ARGUED entries: {set(ARGUED) - found}"


def test_the_search_sees_what_it_must():
    """The searcher itself: each way of writing is caught, each safe one is not."""
    probe = '''
import json, os, shutil, numpy as np
from agl.core import diskwrite
def bad(p, fig, df, out):
    open(p, "w"); p.write_text("x"); os.replace(p, p); shutil.copyfile(p, p); fig.savefig(p)
    df.to_csv(p); np.save(p, 1); json.dump({}, out); os.open(p, os.O_WRONLY | os.O_CREAT); p.rename(p)
def good(p, fig, df):
    open(p); open(p, "rb"); diskwrite.write_text(p, "x"); df.to_csv(index=False)
    with diskwrite.atomic_file(p) as fh:
        fig.savefig(fh); json.dump({}, fh); np.save(fh, 1)
'''
    path = REPO / "build" / "writers_probe.py"
    try:
        diskwrite.write_text(path, probe)
        seen = list(writes(path))
    finally:
        path.unlink(missing_ok=True)
    assert {fn for fn, _, _ in seen} == {"bad"}, seen
    assert len(seen) == 10, seen


def _plant(at: Path, victim: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.unlink(missing_ok=True)
    at.symlink_to(victim)


@pytest.mark.parametrize("write", [
    lambda p: diskwrite.write_text(p, "new\n"),
    lambda p: diskwrite.write_bytes(p, b"new\n"),
    lambda p: diskwrite.replace_atomically(p, b"new\n"),
    lambda p: canonical.write_json(p, {"a": 1}),
    lambda p: canonical.write_timings(p, {"a": 1}),
])
def test_the_one_way_replaces_a_link_and_never_writes_through_it(tmp_path, write):
    victim = tmp_path / "thesis.tex"
    victim.write_text("mine\n")
    target = tmp_path / "out" / "file.json"
    _plant(target, victim)
    write(target)
    assert victim.read_text() == "mine\n"
    assert not target.is_symlink() or not canonical.timings_path(target).is_symlink()


def test_atomic_file_replaces_a_link_and_keeps_the_old_file_on_error(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"mine")
    target = tmp_path / "plot.png"
    _plant(target, victim)
    with diskwrite.atomic_file(target) as fh:
        fh.write(b"png")
    assert victim.read_bytes() == b"mine" and target.read_bytes() == b"png" and not target.is_symlink()
    with pytest.raises(RuntimeError), diskwrite.atomic_file(target, "w") as fh:
        fh.write("half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"png" and [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []
    # a link planted at the temporary's guessable name is refused, not followed
    tmp = target.with_name(f".{target.name}.{__import__('os').getpid()}.tmp")
    _plant(tmp, victim)
    with pytest.raises(Exception, match="symbolic link"), diskwrite.atomic_file(target) as fh:
        fh.write(b"x")
    assert victim.read_bytes() == b"mine"


def test_export_writes_no_record_or_samples_file_through_a_link(tmp_path, capsys, synthetic):
    """A link planted at a record or samples file an earlier export wrote: its target outside
    the export folder was overwritten, exit 0."""
    runs, manifest = synthetic
    args = ["export", "eee", "--runs", str(runs), "--manifest", str(manifest), "--out", str(tmp_path / "eee"),
            "--params", str(tmp_path / "none.yaml")]
    assert main(args) == 0, capsys.readouterr().err
    written = sorted(p for p in (tmp_path / "eee").rglob("*") if p.is_file())
    assert {p.suffix for p in written} == {".json", ".jsonl"}
    victims = []
    for n, path in enumerate(written):
        victim = tmp_path / f"victim{n}"
        victim.write_text("mine\n")
        _plant(path, victim)
        victims.append(victim)
    assert main(args) == 0, capsys.readouterr().err
    assert all(v.read_text() == "mine\n" for v in victims)
    assert all(p.is_file() and not p.is_symlink() for p in written)
    json.loads(next(p for p in written if p.suffix == ".json").read_text())


def test_the_leaderboard_writes_no_table_through_a_link(tmp_path, synthetic):
    from agl.scoring import leaderboard

    runs, _ = synthetic
    board = leaderboard.collect([runs / "knn" / "metrics.json"], "paper")
    out = tmp_path / "build"
    written = leaderboard.write(board, out, protocol="paper")
    assert {p.suffix for p in written} == {".csv", ".md", ".html"}
    victims = {}
    for path in written:
        victims[path] = tmp_path / f"victim{path.suffix}"
        victims[path].write_text("mine\n")
        _plant(path, victims[path])
    leaderboard.write(board, out, protocol="paper")
    for path, victim in victims.items():
        assert victim.read_text() == "mine\n", path
        assert not path.is_symlink() and "knn" in path.read_text()


def test_an_mlflow_store_that_is_a_link_or_no_database_is_one_line(tmp_path, monkeypatch):
    from agl.core import tracking
    from agl.errors import AglError

    victim = tmp_path / "victim.db"
    victim.write_bytes(b"")  # an empty file: SQLite would make a store in it
    (tmp_path / "mlflow.db").symlink_to(victim)
    with pytest.raises(AglError, match="is a symbolic link to .*MLFLOW_TRACKING_URI"):
        tracking.prepare_store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert victim.read_bytes() == b""
    (tmp_path / "other.db").write_text("my notes, not a database\n")
    with pytest.raises(AglError, match="not an SQLite database"):
        tracking.prepare_store(f"sqlite:///{tmp_path / 'other.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(AglError, match="not an SQLite database"):
        tracking.runs_view_url()
