"""What a batch pass does not trust (issue 35, item 9): result entries that answer no clip of
their job (garbage, no or an unknown id, one clip twice with two replies), and a state file
whose jobs hold a clip the run lacks, one clip twice, a clip under another's name, or a
field of the wrong type. Entries are counted in one line and their clips asked again; a
state is refused in one line before anything is collected or submitted, so a renamed clip
is never paid twice and no run loops on exit 75. Through the real openai and google-genai
SDKs against tests/fake_batch.py."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
from fake_batch import FakeBatchService, FakeJob
from test_batch_runs import answer, cli, keys, lines, make_clips, run_until_done, settings  # noqa: F401 - keys: autouse fixture

from agl.cli import main


def key_of(row: dict) -> str | None:
    if "custom_id" in row:
        return row["custom_id"]
    return (row.get("metadata") or {}).get("key") if "metadata" in row else row.get("key")


def rekey(row: dict, key: str | None) -> dict:
    row = copy.deepcopy(row)
    if "custom_id" in row:
        row["custom_id"] = key
    elif "metadata" in row:
        row["metadata"] = {"key": key} if key is not None else {}
    else:
        row["key"] = key
    return row


def garble(job: FakeJob, rows: list) -> list:
    """clip_000's entry replaced by a string; an entry for a clip the job lacks, one with no
    id, an identical repeat of clip_001's and a different reply for clip_002 added."""
    by = {key_of(r): r for r in rows}
    out = [r for r in rows if key_of(r) != "clip_000"] + ["garbage"]
    return out + [rekey(by["clip_001"], "k9"), rekey(by["clip_001"], None),
                  rekey(by["clip_001"], "clip_001"), rekey(by["clip_003"], "clip_002")]


@pytest.mark.parametrize("variant", ["openai", "gemini", "gemini-file"])
def test_result_entries_that_answer_no_clip_are_counted_and_their_clips_asked_again(
        tmp_path, variant, capsys):
    manifest, audio = make_clips(tmp_path, 4)
    out = tmp_path / "run"
    with FakeBatchService(answer) as svc:
        svc.tamper = garble
        passes = run_until_done(variant, manifest, audio, out, tmp_path / "cache",
                                settings(variant, svc.url, probe=False))
        assert len(passes) == 2 and len(svc.jobs) == 1
        by_sync = [r.audio_sha256[0] for r in svc.sync_requests]
    said = [x for x in capsys.readouterr().err.splitlines() if "ignored" in x]
    assert len(said) == 1, said
    assert said[0].startswith("batch: job ") and "5 result entries ignored" in said[0]
    for part in ("1 not a mapping", "1 unknown clip 'k9'", "1 no clip id",
                 "1 clip 'clip_001' twice", "1 clip 'clip_002' twice",
                 "its 2 clip(s) without a usable answer are asked again"):
        assert part in said[0], said[0]
    records = {r["sample_id"]: r for r in lines(out)}
    assert {r["status"] for r in records.values()} == {"ok"} and len(records) == 4
    answered_by = {sid: r["meta"]["answered_by"] for sid, r in records.items()}
    assert answered_by == {"clip_000": "sync", "clip_001": "batch", "clip_002": "sync",
                           "clip_003": "batch"}
    assert len(by_sync) == 2
    assert "two different replies" in records["clip_002"]["meta"]["batch_fallback"]
    assert "without a result" in records["clip_000"]["meta"]["batch_fallback"]
    # Each record holds the answer to its own clip's audio (the fake's reply names it).
    assert all(r["reasoning"] == f"heard clip {r['meta']['audio_sha256'][:10]}"
               for r in records.values())


def edit_state(path, how: str) -> None:
    state = json.loads(path.read_text())
    jobs = state["jobs"]
    if how == "unknown":  # clip_001 renamed to a clip the run does not have
        jobs[0]["clips"]["clip_009"] = jobs[0]["clips"].pop("clip_001")
    elif how == "renamed":  # clip_001 renamed to a clip of the run that no job holds
        jobs[0]["clips"]["clip_002"] = jobs[0]["clips"].pop("clip_001")
    elif how == "renamed-recorded":  # clip_002 renamed to clip_000, answered by the probe
        jobs[0]["clips"]["clip_000"] = jobs[0]["clips"].pop("clip_002")
    elif how == "two-jobs":
        jobs[1]["clips"]["clip_000"] = dict(jobs[0]["clips"]["clip_000"])
    elif how == "garbage":
        jobs[1]["created"] = "yesterday"
    path.write_text(json.dumps(state))


@pytest.mark.parametrize("api", ["openai", "gemini"])
@pytest.mark.parametrize("how, message", [
    ("unknown", "holds clip 'clip_009', which is not a clip of this run"),
    ("renamed", "holds clip 'clip_002' with the audio of clip 'clip_001' (renamed?)"),
    ("renamed-recorded", "holds clip 'clip_000' with the audio of clip 'clip_002' (renamed?)"),
    ("two-jobs", "clip 'clip_000' is held by two jobs"),
    ("garbage", "malformed (job "),
])
def test_a_state_file_it_cannot_trust_is_refused_in_one_line_and_nothing_is_paid_twice(
        tmp_path, api, how, message, capsys):
    manifest, audio = make_clips(tmp_path, 4)
    out, cache = tmp_path / "run", tmp_path / "cache"
    path = out / "batch_state.json"
    with FakeBatchService(answer) as svc:
        # `renamed`: the probe job holds clip_000 and clip_001, clip_002 and clip_003 wait;
        # `renamed-recorded`: the probe answered (recorded), a job holds clip_002 and clip_003.
        batch = "{probe: true}" if how.startswith("renamed") else "{probe: false, max_requests: 2}"
        args = cli(api, svc.url, manifest, audio, out, cache, "--batch",
                   "--setting", f"batch={batch}")[3:]  # after `python -m agl.cli`
        for _ in range(2 if how == "renamed-recorded" else 1):
            assert main(args) == 75
        capsys.readouterr()
        good = path.read_text()
        edit_state(path, how)
        creates = svc.creates
        for _ in range(2):  # refused every time, never exit 75 (no endless "come back later")
            assert main(args) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith(f"agl infer: error: {path}: "), err
            assert message in err[0], err[0]
            if how != "garbage":
                job = json.loads(path.read_text())["jobs"][0 if how != "two-jobs" else 1]
                assert job["job_id"] in err[0] and "--batch-cancel" in err[0]
        assert svc.creates == creates and svc.sync_requests == []  # nothing asked meanwhile

        path.write_text(good)  # put right: the run completes, every clip paid once
        for _ in range(4):
            if main(args) == 0:
                break
    assert Counter(svc.billed.values()) == {1: 4} and set(svc.submitted().values()) == {1}
    assert {r["meta"]["answered_by"] for r in lines(out)} == {"batch"}


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["jobs"][0].update(clips={"clip_000": "k"}), "job batch_1: clip 'clip_000' is 'k'"),
    (lambda s: s["jobs"][0].update(created="yesterday"), "job batch_1: field 'created' is 'yesterday'"),
    (lambda s: s["jobs"][0].update(probe="yes"), "job batch_1: field 'probe' is 'yes'"),
    (lambda s: s["jobs"][0].pop("tag"), "job batch_1: no field 'tag'"),
    (lambda s: s["jobs"].append(5), "job #2 is not a mapping"),
    (lambda s: s.update(attempts={"clip_000": "two"}), "attempts: clip 'clip_000' is 'two'"),
], ids=["clips", "created", "probe", "no-tag", "job-not-a-mapping", "attempts"])
def test_a_malformed_state_file_is_one_line_naming_the_job_and_field(tmp_path, edit, message):
    from agl.errors import AglError
    from agl.inference.batch import state as state_mod

    state = state_mod.BatchState("openai", "fake", "fp", jobs=[state_mod.Job(
        tag="agl-1-x", provider="openai", created=1.0, fingerprint="fp", job_id="batch_1",
        clips={"clip_000": {"key": None, "audio_sha256": None}})])
    state_mod.save(tmp_path, state)
    assert state_mod.load(tmp_path) == state  # the file as agl writes it reads back
    raw = json.loads(state_mod.state_path(tmp_path).read_text())
    edit(raw)
    state_mod.state_path(tmp_path).write_text(json.dumps(raw))
    with pytest.raises(AglError) as refused:
        state_mod.load(tmp_path)
    said = str(refused.value)
    assert "\n" not in said and said.startswith(f"{state_mod.state_path(tmp_path)}: malformed (")
    assert message in said and "restore it" in said, said
