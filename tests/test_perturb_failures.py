"""Audio that is not audio in the counterfactual stages (issue 24): a zero-byte, corrupt or
text-as-MP3 clip is recorded as failed with its reason and left out of every derived level,
for every intervention kind; the stage counts it in one warning line. Was: a
`LibsndfileError` traceback for every kind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from factories import manifest

from agl.counterfactual.effects import derive_dataset
from agl.counterfactual.encode import encode_mp3
from agl.counterfactual.perturb import KINDS, parse_perturb
from agl.dataset.checksums import read_lock
from agl.dataset.manifest import write_manifest
from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]
SR = 16000
BAD = {
    "empty": b"",
    "random": np.random.default_rng(7).bytes(4000),
    "text": b"<html>404 Not Found</html>\n" * 40,
}


def _dataset(root: Path, bad: dict[str, bytes]) -> Path:
    """data/'s layout: one real 1.5 s clip (`good`) and the `bad` files under .mp3 names."""
    rng = np.random.default_rng(0)
    files = {"good": encode_mp3((0.1 * rng.standard_normal((int(1.5 * SR), 1))).astype(np.float32), SR),
             **bad}
    rows = []
    for key, data in files.items():
        path = root / "audio" / key / f"{key}.mp3"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append({"key": key, "mp3name": f"{key}.mp3", "mp3seconds": 1.5})
    write_manifest(manifest(rows), root / "manifest.csv")
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cf") / "data"
    _dataset(root, BAD)
    good = (root / "audio" / "good" / "good.mp3").read_bytes()
    cut = root / "audio" / "cut" / "cut.mp3"  # an MP3 header and nothing after it
    cut.parent.mkdir()
    cut.write_bytes(good[:200])
    frame = pd.read_csv(root / "manifest.csv", keep_default_na=False, dtype=str)
    frame.loc[len(frame)] = {**frame.iloc[0].to_dict(), "key": "cut", "mp3name": "cut.mp3"}
    write_manifest(frame, root / "manifest.csv")
    return root


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_intervention_leaves_out_what_does_not_decode(data, tmp_path, kind):
    levels = parse_perturb({kind: {"kind": kind}})[kind]
    summary = derive_dataset(data, tmp_path / kind, levels)
    assert sorted(summary["failed"]) == ["cut", "empty", "random", "text"]
    assert summary["failed"]["empty"] == "empty.mp3 is empty (0 bytes)"
    for key in ("random", "text", "cut"):
        reason = summary["failed"][key]
        assert reason.startswith(f"cannot decode {key}.mp3") or "no samples" in reason, reason
        assert str(data) not in reason  # the file's name only: the summary is a DVC output
    for level in summary["levels"]:
        folder = tmp_path / kind / level
        assert list(pd.read_csv(folder / "manifest.csv")["key"]) == ["good"]
        written = [f"good/{p.name}" for p in (folder / "audio" / "good").iterdir()]
        assert list(read_lock(folder / "lock.json")) == written
        assert [p.name for p in (folder / "audio").iterdir()] == ["good"]


def test_a_dataset_where_nothing_decodes_is_one_line(tmp_path):
    root = _dataset(tmp_path / "data", BAD)
    (root / "audio" / "good" / "good.mp3").write_bytes(b"")
    with pytest.raises(AglError, match=r"none of the 4 clip\(s\) decodes \(first: empty: empty.mp3 is empty") as err:
        derive_dataset(root, tmp_path / "out", parse_perturb({"n": {"kind": "none"}})["n"])
    assert "\n" not in str(err.value)


def test_a_dataset_where_every_clip_decodes_keeps_its_summary(tmp_path):
    """No `failed` key unless something failed: the pinned outputs keep their bytes."""
    root = _dataset(tmp_path / "data", {})
    summary = derive_dataset(root, tmp_path / "out", parse_perturb({"n": {"kind": "none"}})["n"])
    assert "failed" not in summary


def test_the_stage_counts_the_failures_in_one_warning_line(data, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "stages"))
    import _params

    params = tmp_path / "params.yaml"
    params.write_text("perturb:\n  rev:\n    kind: reverse\ncounterfactual:\n  format: mp3\n")
    monkeypatch.setattr(_params, "ROOT", tmp_path)
    monkeypatch.delitem(sys.modules, "perturb", raising=False)
    import perturb as stage

    out, summary = tmp_path / "out", tmp_path / "summary.json"
    assert stage.main(["rev", str(data), str(out), str(summary)]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "Traceback" not in err
    assert "4 of 5 clip(s) cannot be decoded and are left out of every level (first: cut:" in warnings[0]
    assert sorted(json.loads(summary.read_text())["failed"]) == ["cut", "empty", "random", "text"]
