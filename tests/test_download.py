"""The download stage against a local fake of the Internet Archive serving two real MP3s."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import yaml
from fake_archive import FakeArchive

from agl.cli import main
from agl.dataset.checksums import read_lock, read_source
from agl.dataset.download import download_clips
from agl.dataset.fetch import Policy
from agl.dataset.manifest import Clip, ManifestWarning, clips, load_manifest, write_manifest
from agl.dataset.prepare import DatasetSpec, from_params, prepare
from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]
KEYS = ("aporee_26839_30948", "aporee_5201_6631")


@pytest.fixture
def archive(archive_dir):
    server = FakeArchive(root=archive_dir).start()
    yield server
    server.stop()


@pytest.fixture
def manifest(agl1k_manifest, tmp_path) -> Path:
    """The two clips of ../shared/data/agl1k/archive, rows as the AGL1K manifest has them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        frame = load_manifest(agl1k_manifest)
    path = tmp_path / "two.csv"
    write_manifest(frame[frame["key"].isin(KEYS)], path)
    return path


def policy(archive: FakeArchive, **kw) -> Policy:
    kw.setdefault("sleep", lambda s: None)  # backoff is recorded where a test needs it
    return Policy(
        base_url=f"{archive.url}/download", metadata_url=f"{archive.url}/metadata",
        progress=False, **kw,
    )  # fmt: skip


def rows(manifest: Path) -> list[Clip]:
    return clips(load_manifest(manifest))


def cli(archive, manifest, out, *extra) -> int:
    return main([
        "download", "--params", str(out.parent / "absent.yaml"), "--dataset", str(manifest),
        "--out", str(out), "--base-url", f"{archive.url}/download",
        "--metadata-url", f"{archive.url}/metadata", "--no-progress", *extra,
    ])  # fmt: skip


def metadata_for(archive_dir: Path, key: str, md5: str | None = None) -> dict:
    files = []
    for f in (archive_dir / key).iterdir():
        data = f.read_bytes()
        files.append({
            "name": f.name, "size": str(len(data)), "format": "VBR MP3",
            "md5": md5 or hashlib.md5(data).hexdigest(), "sha1": hashlib.sha1(data).hexdigest(),
        })  # fmt: skip
    files.append({"name": f"{key}_meta.xml", "size": "1234", "md5": "0" * 32})
    return {"metadata": {"identifier": key}, "files": files}


def test_both_files_arrive_byte_identical_then_nothing_is_fetched_again(
    archive, archive_dir, manifest, tmp_path, capsys
):
    for key in KEYS:
        archive.metadata[key] = metadata_for(archive_dir, key)
    out = tmp_path / "data"
    assert cli(archive, manifest, out, "--summary", str(tmp_path / "s.json")) == 0
    for key in KEYS:
        (src,) = (archive_dir / key).iterdir()
        assert (out / "audio" / key / src.name).read_bytes() == src.read_bytes()
        assert not list((out / "audio" / key).glob("*.part"))
    lock = read_lock(out / "lock.json")
    assert {e.sha256 for e in lock.values()} == {
        hashlib.sha256(p.read_bytes()).hexdigest() for p in archive_dir.glob("*/*.mp3")
    }
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["downloaded"], summary["present"], summary["failed"]) == (2, 0, 0)
    assert summary["archive_verified"] == 2
    assert summary["bytes_downloaded"] == sum(p.stat().st_size for p in archive_dir.glob("*/*"))
    assert all("agl/" in r.headers["User-Agent"] for r in archive.log)
    assert "2 downloaded, 0 already present, 0 failed" in capsys.readouterr().err
    assert load_manifest(out / "manifest.csv")["key"].tolist() == list(
        load_manifest(manifest)["key"]
    )

    fetched = len(archive.requests())
    assert cli(archive, manifest, out, "--summary", str(tmp_path / "s.json")) == 0
    assert len(archive.requests()) == fetched  # not one byte of audio requested again
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["downloaded"], summary["present"], summary["bytes_downloaded"]) == (0, 2, 0)


def test_a_run_cut_off_mid_file_resumes_with_range(archive, archive_dir, manifest, tmp_path):
    key = KEYS[0]
    (src,) = (archive_dir / key).iterdir()
    path = f"/download/{key}/{src.name}"
    half = src.stat().st_size // 2
    archive.faults[path] = [f"cut:{half}"]
    out = tmp_path / "data"
    # first run: no retries, so the cut transfer is left as it is, like a killed run
    first = download_clips(rows(manifest), out, policy(archive, retries=0, failure_budget=1))
    assert [r.status for r in first.results if key in r.relpath] == ["failed"]
    part = out / "audio" / key / f"{src.name}.part"
    assert part.stat().st_size == half and not (out / "audio" / key / src.name).exists()

    second = download_clips(rows(manifest), out, policy(archive))
    assert (out / "audio" / key / src.name).read_bytes() == src.read_bytes()
    assert not part.exists()
    resumed = archive.requests(path)[-1]
    assert resumed.headers["Range"] == f"bytes={half}-" and resumed.status == 206
    assert resumed.body_bytes == src.stat().st_size - half  # only the missing half
    assert second.count("downloaded") == 1 and second.count("present") == 1


def test_a_killed_run_resumes_where_it_stopped(archive, archive_dir, manifest, tmp_path):
    key = KEYS[0]
    (src,) = (archive_dir / key).iterdir()
    path = f"/download/{key}/{src.name}"
    sent = src.stat().st_size // 3
    archive.faults[path] = [f"hang:{sent}"]
    out = tmp_path / "data"
    cmd = [sys.executable, "-m", "agl.cli", "download", "--params", str(tmp_path / "none.yaml"),
           "--dataset", str(manifest), "--out", str(out), "--base-url", f"{archive.url}/download",
           "--metadata-url", f"{archive.url}/metadata", "--no-progress", "--jobs", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    part = out / "audio" / key / f"{src.name}.part"
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size == sent):  # the server holds the rest
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.02)  # polling a subprocess's progress: no event to wait on
    proc.kill()
    proc.wait(timeout=30)
    assert not (out / "audio" / key / src.name).exists()

    assert cli(archive, manifest, out) == 0
    assert (out / "audio" / key / src.name).read_bytes() == src.read_bytes()
    resumed = archive.requests(path)[-1]
    assert resumed.headers["Range"] == f"bytes={sent}-" and resumed.body_bytes == (
        src.stat().st_size - sent
    )


@pytest.mark.parametrize("with_metadata", [True, False])
def test_a_complete_part_is_not_fetched_again(
    archive, archive_dir, manifest, tmp_path, with_metadata
):
    key = KEYS[1]
    (src,) = (archive_dir / key).iterdir()
    if with_metadata:
        archive.metadata[key] = metadata_for(archive_dir, key)
    part = tmp_path / "data" / "audio" / key / f"{src.name}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(src.read_bytes())  # killed after the last byte, before the rename
    summary = download_clips(rows(manifest), tmp_path / "data", policy(archive))
    assert summary.count("downloaded") == 2 and not part.exists()
    assert (tmp_path / "data" / "audio" / key / src.name).read_bytes() == src.read_bytes()
    sent = [r.body_bytes for r in archive.requests(f"/download/{key}/")]
    assert sent == ([] if with_metadata else [0])  # metadata: no request; else one 416


def test_a_source_that_changed_since_the_lock_is_an_error(
    archive, archive_dir, manifest, tmp_path
):
    out = tmp_path / "data"
    download_clips(rows(manifest), out, policy(archive))
    key = KEYS[0]
    (src,) = (archive_dir / key).iterdir()
    (out / "audio" / key / src.name).unlink()
    lock = read_lock(out / "lock.json")
    rel = f"{key}/{src.name}"
    lock[rel] = type(lock[rel])(size=lock[rel].size, sha256="0" * 64)
    from agl.dataset.checksums import write_lock

    write_lock(out / "lock.json", lock)
    with pytest.raises(AglError, match=f"{rel}: downloaded .*the source changed"):
        download_clips(rows(manifest), out, policy(archive, failure_budget=5))
    assert not (out / "audio" / key / src.name).exists()
    assert read_lock(out / "lock.json")[rel].sha256 == "0" * 64  # the lock is not rewritten


def test_a_dropped_connection_is_retried_and_resumed_within_the_run(
    archive, archive_dir, manifest, tmp_path
):
    key = KEYS[1]
    (src,) = (archive_dir / key).iterdir()
    path = f"/download/{key}/{src.name}"
    archive.faults[path] = ["cut:1000", "cut:5000"]
    summary = download_clips(rows(manifest), tmp_path / "data", policy(archive))
    assert summary.count("downloaded") == 2
    assert (tmp_path / "data" / "audio" / key / src.name).read_bytes() == src.read_bytes()
    ranges = [r.headers.get("Range") for r in archive.requests(path)]
    assert ranges == [None, "bytes=1000-", "bytes=6000-"]


def test_a_server_ignoring_range_restarts_the_file(archive, archive_dir, manifest, tmp_path):
    key = KEYS[0]
    (src,) = (archive_dir / key).iterdir()
    archive.honour_range = False
    archive.faults[f"/download/{key}/{src.name}"] = ["cut:3000"]
    download_clips(rows(manifest), tmp_path / "data", policy(archive))
    assert (tmp_path / "data" / "audio" / key / src.name).read_bytes() == src.read_bytes()


def test_500_twice_then_200_succeeds_with_backoff(archive, archive_dir, manifest, tmp_path):
    key = KEYS[0]
    (src,) = (archive_dir / key).iterdir()
    path = f"/download/{key}/{src.name}"
    archive.faults[path] = ["500", "500"]
    waits: list[float] = []
    summary = download_clips(
        rows(manifest), tmp_path / "data", policy(archive, backoff_s=1.0, sleep=waits.append)
    )
    assert summary.count("downloaded") == 2
    assert [r.status for r in archive.requests(path)] == [500, 500, 200]
    assert 0.5 <= waits[0] <= 1.5 and 1.0 <= waits[1] <= 3.0  # exponential, with jitter


def test_retry_after_is_honoured(archive, archive_dir, manifest, tmp_path):
    key = KEYS[1]
    (src,) = (archive_dir / key).iterdir()
    archive.faults[f"/download/{key}/{src.name}"] = ["429:7", "503:2"]
    waits: list[float] = []
    download_clips(rows(manifest), tmp_path / "data", policy(archive, sleep=waits.append))
    assert waits == [7.0, 2.0]


def test_a_timeout_is_retried(archive, archive_dir, manifest, tmp_path):
    key = KEYS[1]
    (src,) = (archive_dir / key).iterdir()
    archive.faults[f"/download/{key}/{src.name}"] = ["stall"]
    summary = download_clips(
        rows(manifest), tmp_path / "data", policy(archive, timeout_s=0.3)
    )
    assert summary.count("downloaded") == 2


def test_404_is_reported_per_clip_and_the_budget_decides(archive, manifest, tmp_path, capsys):
    frame = load_manifest(manifest)
    gone = frame.iloc[[0]].assign(key="aporee_0_0", mp3name="gone.mp3")
    three = tmp_path / "three.csv"
    write_manifest(frame._append(gone, ignore_index=True), three)
    out = tmp_path / "data"
    assert cli(archive, three, out) == 2
    err = capsys.readouterr().err
    summary_line, missing, audit, error = err.strip().splitlines()  # no traceback
    assert "2 downloaded, 0 already present, 1 failed" in summary_line
    assert missing.startswith("agl download: failed aporee_0_0/gone.mp3: not found (HTTP 404)")
    # data/tag_audit.csv over the clips it has: both real clips name their place in their tags
    assert "2 of 2 clips carry their place in their tags; 1 in their file name" in audit
    assert error.startswith("agl download: error: 1 clip(s) failed")
    # within the budget the run passes, names the missing clip, and keeps what it has
    assert cli(archive, three, out, "--failure-budget", "1", "--summary", str(tmp_path / "s")) == 0
    summary = json.loads((tmp_path / "s").read_text())
    assert list(summary["missing"]) == ["aporee_0_0/gone.mp3"]
    assert "HTTP 404" in summary["missing"]["aporee_0_0/gone.mp3"]
    assert summary["present"] == 2


def test_a_corrupted_byte_is_caught_by_the_lock_file(archive, archive_dir, manifest, tmp_path):
    out = tmp_path / "data"
    download_clips(rows(manifest), out, policy(archive))
    key = KEYS[1]
    (src,) = (archive_dir / key).iterdir()
    target = out / "audio" / key / src.name
    data = bytearray(target.read_bytes())
    data[len(data) // 3] ^= 0x01
    target.write_bytes(bytes(data))
    fetched = len(archive.requests())
    with pytest.raises(AglError, match=f"differ from .*lock.json: {key}/{src.name}"):
        download_clips(rows(manifest), out, policy(archive, failure_budget=5))
    assert target.read_bytes() == bytes(data)  # never silently overwritten
    assert len(archive.requests()) == fetched


def test_archive_checksum_mismatch_is_a_failure(archive, archive_dir, manifest, tmp_path):
    key = KEYS[0]
    archive.metadata[key] = metadata_for(archive_dir, key, md5="0" * 32)
    summary = download_clips(
        rows(manifest), tmp_path / "data", policy(archive, retries=1, failure_budget=1)
    )
    (failed,) = summary.failed
    assert failed.relpath.startswith(key) and "md5" in failed.reason
    assert not list((tmp_path / "data" / "audio" / key).iterdir())  # nothing kept
    assert key + "/" not in json.dumps(list(read_lock(tmp_path / "data" / "lock.json")))


def test_a_file_damaged_in_transit_is_fetched_again(archive, archive_dir, manifest, tmp_path):
    key = KEYS[0]
    (src,) = (archive_dir / key).iterdir()
    archive.metadata[key] = metadata_for(archive_dir, key)
    archive.faults[f"/download/{key}/{src.name}"] = ["flip"]
    summary = download_clips(rows(manifest), tmp_path / "data", policy(archive))
    assert summary.count("downloaded") == 2
    assert (tmp_path / "data" / "audio" / key / src.name).read_bytes() == src.read_bytes()


def test_unsafe_names_are_refused_before_any_request(archive, manifest, tmp_path, capsys):
    frame = load_manifest(manifest)
    evil = tmp_path / "evil.csv"
    write_manifest(frame.assign(mp3name=["ok.mp3", "../../x.mp3"]), evil)
    out = tmp_path / "inner" / "data"
    assert cli(archive, evil, out) == 2
    err = capsys.readouterr().err
    assert "mp3name" in err and "../../x.mp3" in err and "plain file name" in err
    assert archive.log == [] and not (tmp_path / "x.mp3").exists()
    # the library refuses it too, whatever the caller built
    clip = Clip("aporee_1_2", "../../x.mp3", 0.0, 0.0, 1.0, "", "", "")
    with pytest.raises(AglError, match="not a plain file name"):
        download_clips([clip], out, policy(archive))
    with pytest.raises(AglError, match="key"):
        download_clips([Clip("..", "x.mp3", 0.0, 0.0, 1.0, "", "", "")], out, policy(archive))
    assert archive.log == [] and not out.exists()


def test_agl1k_manifest_is_fetched_once_checked_and_repaired(
    archive, agl1k_manifest, tmp_path, capsys
):
    lines = agl1k_manifest.read_text(encoding="utf-8").splitlines(keepends=True)
    published = "".join([lines[0]] + [ln for ln in lines if ln.startswith(KEYS)]).encode()
    archive.documents["/agl1k.csv"] = published
    sha = hashlib.sha256(published).hexdigest()
    spec = DatasetSpec(dataset="agl1k", out=tmp_path / "data",
                       manifest_url=f"{archive.url}/agl1k.csv", manifest_sha256=sha)  # fmt: skip
    summary = prepare(spec, policy(archive))
    assert summary["downloaded"] == 2 and summary["manifest_sha256"] == sha
    assert "split 'channel_environment_and_background'" in capsys.readouterr().err
    header = (tmp_path / "data" / "manifest.csv").read_text().splitlines()[0].split(",")
    assert "channel" in header and "environment_and_background" in header
    assert read_source(tmp_path / "data" / "lock.json")["manifest_sha256"] == sha
    prepare(spec, policy(archive))  # pinned and present: no second fetch of the manifest
    assert len(archive.requests("/agl1k.csv")) == 1

    other = DatasetSpec(dataset="agl1k", out=tmp_path / "other",
                        manifest_url=f"{archive.url}/agl1k.csv", manifest_sha256="0" * 64)  # fmt: skip
    with pytest.raises(AglError, match="differs from the pinned"):
        prepare(other, policy(archive))
    assert not (tmp_path / "other" / "audio").exists()


def test_switching_dataset_prunes_clips_the_manifest_does_not_name(
    archive, manifest, tmp_path
):
    out = tmp_path / "data"
    (out / "audio" / "demo_0001").mkdir(parents=True)
    (out / "audio" / "demo_0001" / "x.mp3").write_bytes(b"old")
    (out / "demo_truth.json").write_text("{}")
    with pytest.raises(AglError, match="demo_0001"):
        prepare(DatasetSpec(dataset=str(manifest), out=out, prune=False), policy(archive))
    assert not (out / "manifest.csv").exists() and archive.log == []  # refused up front
    prepare(DatasetSpec(dataset=str(manifest), out=out), policy(archive))
    assert sorted(p.name for p in (out / "audio").iterdir()) == sorted(KEYS)
    assert sorted(p.name for p in out.iterdir()) == ["audio", "croissant.json", "lock.json", "manifest.csv",
                                                     "tag_audit.csv"]


def test_params_are_validated_naming_the_key():
    with pytest.raises(AglError, match="download.jobs"):
        from_params({"download": {"jobs": 0}})
    with pytest.raises(AglError, match=r"params.yaml: download: unknown key\(s\) job; known: .*jobs"):
        from_params({"download": {"job": 2}}, source="params.yaml")
    spec, pol, _ = from_params({"data": {"dataset": "agl1k"}, "download": {"jobs": 3}})
    assert spec.dataset == "agl1k" and pol.jobs == 3


def test_stage_script_reads_params_and_writes_summary(archive, manifest, tmp_path):
    params = {
        "data": {"dataset": str(manifest)},
        "download": {
            "out": str(tmp_path / "data"), "base_url": f"{archive.url}/download",
            "metadata_url": None, "jobs": 2, "summary": str(tmp_path / "summary.json"),
        },
    }  # fmt: skip
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    proc = subprocess.run(
        [sys.executable, str(REPO / "stages" / "download.py"), "--params",
         str(tmp_path / "params.yaml")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["downloaded"] == 2 and summary["archive_verified"] == 0
    assert archive.requests("/metadata/") == []  # metadata_url: null skips the Archive check
