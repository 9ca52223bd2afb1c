"""No write follows a link agl did not expect (issue 35): the single-writer lock file and every
`.part` file are opened without following links, and must be regular files with one name.

Was: a symlink at the lock file's path (in the shared temporary folder) was opened and
truncated through, leaving the file it pointed to at 0 bytes after `agl infer ... --out OUT`;
a `.part` symlink planted in `data/audio` made `agl download` write the clip into its target.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from factories import manifest
from fake_archive import FakeArchive

from agl.cli import main
from agl.core.nofollow import NotARegularFile, open_part, write_part
from agl.core.single_writer import exclusive, lock_path
from agl.dataset.download import download_clips
from agl.dataset.fetch import Policy
from agl.dataset.manifest import clips, write_manifest
from agl.errors import AglError

PRECIOUS = b"a thesis, three years of work\n"


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The system's temporary folder (where lock files live) made a fresh one for the test."""
    tmp = tmp_path / "systmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def plant(path, kind: str, victim) -> None:
    """Something that is not a regular file of agl's at `path`."""
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling link":
        path.symlink_to(victim.parent / "no-such-file")
    elif kind == "link to a file":
        path.symlink_to(victim)
    elif kind == "link to /dev/full":
        path.symlink_to("/dev/full")
    elif kind == "hard link":
        os.link(victim, path)
    else:
        raise AssertionError(kind)


KINDS = ["folder", "fifo", "dangling link", "link to a file", "link to /dev/full", "hard link"]
WORDS = {"folder": "is a folder", "fifo": "is a FIFO", "dangling link": "is a symbolic link to",
         "link to a file": "is a symbolic link to", "link to /dev/full": "is a symbolic link to /dev/full",
         "hard link": "is a hard link"}


@pytest.mark.parametrize("kind", KINDS)
def test_infer_refuses_a_lock_file_that_is_not_a_file_and_leaves_its_target(
        kind, private_tmp, tmp_path, capfd):
    m = tmp_path / "manifest.csv"
    write_manifest(manifest([{}]), m)
    victim = tmp_path / "thesis.tex"
    victim.write_bytes(PRECIOUS)
    run = tmp_path / "run"
    lock = lock_path(run)
    assert lock.parent == private_tmp
    plant(lock, kind, victim)
    rc = main(["infer", "--backend", "random", "--manifest", str(m), "--out", str(run),
               "--no-progress", "--cache-dir", ""])
    err = capfd.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"agl infer: error: {lock}: the lock file of {run} {WORDS[kind]}"), lines[0]
    assert "remove it" in lines[0] and "nothing was written" in lines[0]
    assert victim.read_bytes() == PRECIOUS  # was: 0 bytes for a link to it
    assert not (run / "predictions.jsonl").exists()


def test_the_lock_file_goes_with_its_holder_and_one_left_behind_is_taken_again(private_tmp, tmp_path):
    """A finished run removes its lock file (the temporary folder once held one per folder ever
    locked); the regular file a killed run leaves behind is the next run's lock, not a refusal."""
    lock = lock_path(tmp_path / "run")
    with exclusive(tmp_path / "run", "a test"):
        assert lock.is_file()
    assert not lock.exists()
    lock.write_text("pid 1: killed with -9")  # what a holder killed with -9 leaves
    for _ in range(2):
        with exclusive(tmp_path / "run", "a test"):
            assert lock.read_text().startswith(f"pid {os.getpid()}: ")
    assert not lock.exists()


def test_a_lock_file_opened_as_its_holder_removes_it_is_not_taken(private_tmp, tmp_path, monkeypatch):
    """The race the removal opens: a writer that opened the file just before its holder removed
    it must not lock that orphan while another writer holds the file now under the name."""
    import threading

    import agl.core.single_writer as single_writer

    folder = tmp_path / "run"
    with exclusive(folder, "the first writer"):
        orphan = os.open(lock_path(folder), os.O_RDWR)  # the second writer opens it here...
    held, done = threading.Event(), threading.Event()

    def third_writer():
        with exclusive(folder, "a third writer"):  # ...a new file under the same name
            held.set()
            done.wait(60)

    thread = threading.Thread(target=third_writer)
    thread.start()
    assert held.wait(60)
    opens = iter([orphan])  # ...and its lock attempt comes now, on the orphan
    real_open = single_writer.open_nofollow
    monkeypatch.setattr(single_writer, "open_nofollow", lambda *a: next(opens, None) or real_open(*a))
    try:
        with pytest.raises(AglError, match="another process is writing into this folder"):
            with exclusive(folder, "the second writer"):
                pass
    finally:
        done.set()
        thread.join()
    assert next(opens, None) is None  # the orphan was tried first


# --- .part files ---------------------------------------------------------------------------


@pytest.fixture
def archive(tmp_path):
    root = tmp_path / "archive"
    (root / "k0").mkdir(parents=True)
    (root / "k0" / "c0.mp3").write_bytes(b"ID3" + bytes(5000))
    server = FakeArchive(root=root).start()
    yield server
    server.stop()


@pytest.mark.parametrize("kind", ["folder", "fifo", "dangling link", "link to a file", "hard link"])
def test_download_never_writes_through_a_planted_part(kind, archive, tmp_path):
    victim = tmp_path / "bashrc"
    victim.write_bytes(PRECIOUS)
    out = tmp_path / "data"
    part = out / "audio" / "k0" / "c0.mp3.part"
    part.parent.mkdir(parents=True)
    plant(part, kind, victim)
    policy = Policy(base_url=f"{archive.url}/download", metadata_url=f"{archive.url}/metadata",
                    progress=False, retries=0, sleep=lambda s: None)
    with pytest.raises(AglError) as exc:
        download_clips(clips(manifest([{}])), out, policy)
    line = str(exc.value)
    assert "\n" not in line and line.startswith(f"{part}: the partial download {WORDS[kind]}"), line
    assert f"rm {part}" in line
    assert victim.read_bytes() == PRECIOUS  # was: the clip's bytes, appended or in its place
    assert not archive.requests("/download/")  # refused before any request
    assert not (out / "audio" / "k0" / "c0.mp3").exists()


def test_a_stale_part_is_made_anew_and_a_hard_linked_one_only_unlinked(tmp_path):
    part = tmp_path / "x.part"
    part.write_bytes(b"stale")
    write_part(part, b"new")
    assert part.read_bytes() == b"new"
    victim = tmp_path / "victim"
    victim.write_bytes(PRECIOUS)
    part.unlink()
    os.link(victim, part)
    with pytest.raises(NotARegularFile, match="hard link"):
        open_part(part, append=True)  # appending would write into the other name's file
    write_part(part, b"new")  # from byte 0: the name is replaced, the other file untouched
    assert part.read_bytes() == b"new" and victim.read_bytes() == PRECIOUS


def test_a_staged_manifest_is_never_written_through_a_link(tmp_path):
    from agl.dataset.prepare import _write_manifest

    victim = tmp_path / "thesis.tex"
    victim.write_bytes(PRECIOUS)
    (tmp_path / ".manifest.csv.part").symlink_to(victim)
    with pytest.raises(NotARegularFile, match="the partial download is a symbolic link"):
        _write_manifest(manifest([{}]), tmp_path / "manifest.csv")
    assert victim.read_bytes() == PRECIOUS and not (tmp_path / "manifest.csv").exists()


def test_a_tracked_output_is_never_written_through_its_temporary_name(tmp_path):
    """The canonical writers rename `.<name>.<pid>.tmp` into place: a guessable name."""
    from agl.core import canonical

    victim = tmp_path / "thesis.tex"
    victim.write_bytes(PRECIOUS)
    out = tmp_path / "metrics.json"
    (tmp_path / f".{out.name}.{os.getpid()}.tmp").symlink_to(victim)
    with pytest.raises(NotARegularFile, match="is a symbolic link to"):
        canonical.write_json(out, {"mean_km": 1.0})
    assert victim.read_bytes() == PRECIOUS and not out.exists()
