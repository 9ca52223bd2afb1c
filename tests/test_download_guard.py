"""`agl download` against short files and a second writer (issue 14, points 3 and 4)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import test_download
from fake_archive import FakeArchive
from test_download import cli, policy, rows

from agl.dataset.checksums import Entry, read_lock, write_lock
from agl.dataset.download import download_clips

# The two real clips and the fake Archive serving them, as test_download sets them up.
archive = test_download.archive
manifest = test_download.manifest


@pytest.fixture
def half_archive(archive_dir, tmp_path):
    """The Archive serving each real MP3 cut to its first third (no checksums listed)."""
    root = tmp_path / "served"
    for src in archive_dir.glob("*/*.mp3"):
        dest = root / src.parent.name / src.name
        dest.parent.mkdir(parents=True)
        data = src.read_bytes()
        dest.write_bytes(data[: len(data) // 3])
    server = FakeArchive(root=root).start()
    yield server
    server.stop()


def test_a_truncated_file_is_not_accepted(half_archive, manifest, tmp_path, capsys):
    out = tmp_path / "data"
    rc = cli(half_archive, manifest, out, "--summary", str(tmp_path / "s.json"), "--failure-budget", "5")
    err = capsys.readouterr().err
    assert rc == 0  # within the budget, but nothing short was recorded as good
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["failed"] == 2 and summary["downloaded"] == 0
    assert all("truncated download" in r and "manifest says" in r for r in summary["missing"].values())
    assert read_lock(out / "lock.json") == {}
    assert not list((out / "audio").glob("*/*.mp3"))
    assert "truncated download" in err


def test_unverified_downloads_are_counted_and_announced(
    archive,
    manifest,
    tmp_path,
    capsys,
):
    out = tmp_path / "data"
    # No metadata queued: the fake Archive answers 404 for it, as for an item without one.
    assert cli(archive, manifest, out, "--summary", str(tmp_path / "s.json")) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["downloaded"] == 2 and summary["unverified"] == 2
    assert summary["archive_verified"] == 0
    assert "2 new file(s) NOT verified against Archive checksums" in capsys.readouterr().err


def test_a_second_download_into_the_same_folder_refuses(
    archive,
    manifest,
    tmp_path,
    capsys,
):
    out = tmp_path / "data"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom agl.core.single_writer import exclusive\n"
            f"with exclusive({str(out)!r}, 'test'):\n"
            "    print('held', flush=True)\n    sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cli(archive, manifest, out) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert "another process is writing into this folder" in err[0]
        assert f"pid {holder.pid}" in err[0]
        assert archive.requests() == []  # refused before any request
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert cli(archive, manifest, out) == 0  # released when the holder ended


def test_the_lock_file_is_merged_not_replaced(archive, manifest, tmp_path):
    out = tmp_path / "data"
    other = {"aporee_1_1/other.mp3": Entry(size=3, sha256="ab" * 32)}
    write_lock(out / "lock.json", other)
    download_clips(rows(manifest), out, policy(archive))
    lock = read_lock(out / "lock.json")
    assert set(lock) == {*other, *(f"{c.key}/{c.mp3name}" for c in rows(manifest))}


@pytest.mark.parametrize("command", [["download"], ["demo"]])
def test_run_from_a_subfolder_of_the_project_is_refused_naming_the_root(command, tmp_path, monkeypatch, capsys):
    """From docs/, `agl download` once filled docs/data/ from the built-in defaults, exit 0."""
    from agl.cli import main

    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "params.yaml").write_text("data: {dataset: demo}\n")
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "docs")
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"from the project's root, {tmp_path}" in err[0] and "--out" in err[0]
    assert not (tmp_path / "docs" / "data").exists()
