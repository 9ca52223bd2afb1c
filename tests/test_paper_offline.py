"""The paper's files offline: a failed fetch says how to use a local copy, a local folder as
`paper.base_url` serves the same layout with its pins still checked, and moving
`paper.base_url` re-runs no model stage (their paper prompt is pinned by SHA-256)."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest
import yaml

from agl.contracts.models import ModelSpec
from agl.dataset.sources import SourceConfig, resolve_source
from agl.errors import AglError
from agl.inference.runspec import InferSettings, stage_sources

REPO = Path(__file__).resolve().parents[1]
REL = "results/audio_localization/demo/seed_42.jsonl"


def _config(base_url: str, data: bytes) -> SourceConfig:
    return SourceConfig.from_params({"paper": {"base_url": base_url, "published": {
        "demo": {"path": REL, "sha256": hashlib.sha256(data).hexdigest()}}}})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the socket is: a refused connection


def test_a_fetch_without_network_names_the_local_route(tmp_path):
    cfg = _config(f"http://127.0.0.1:{_closed_port()}/AGL1K", b"{}\n")
    with pytest.raises(AglError) as err:
        resolve_source("paper:demo", cache_dir=tmp_path / "cache", config=cfg)
    msg = str(err.value)
    assert "\n" not in msg and "cannot fetch" in msg and "paper.base_url" in msg, msg
    assert "local folder" in msg and "SHA-256 is still checked" in msg and REL in msg, msg


def test_a_local_folder_serves_the_layout_and_its_pin_is_checked(tmp_path):
    data = b'{"question_id": 1}\n'
    mirror = tmp_path / "mirror"
    (mirror / REL).parent.mkdir(parents=True)
    (mirror / REL).write_bytes(data)
    got = resolve_source("paper:demo", cache_dir=tmp_path / "cache", config=_config(str(mirror), data))
    assert got.read_bytes() == data
    (mirror / REL).write_bytes(data + b"edited\n")  # a copy that is not the pinned file
    with pytest.raises(AglError) as err:
        resolve_source("paper:demo", cache_dir=tmp_path / "other", config=_config(str(mirror), data))
    assert "SHA-256" in str(err.value) and "nothing cached" in str(err.value), str(err.value)


def _stage_params(published: dict) -> dict:
    return {"paper.base_url": "/anywhere", "paper.published": published}


def test_a_stage_reads_its_paper_prompt_only_from_a_pinned_file():
    spec = ModelSpec("gpt", "openai", "gpt-4o", prompt="agl1k-paper", prompt_source="paper:loose")
    with pytest.raises(AglError) as err:
        stage_sources(_stage_params({"loose": {"path": REL}}), spec, InferSettings(), "params.yaml")
    assert "\n" not in str(err.value) and "paper.published.loose" in str(err.value)
    assert "not pinned" in str(err.value), str(err.value)
    pinned = {"loose": {"path": REL, "sha256": "0" * 64}}
    assert stage_sources(_stage_params(pinned), spec, InferSettings(), "params.yaml").base_url == "/anywhere"
    # Another prompt does not read the file: nothing to pin.
    plain = ModelSpec("gpt", "openai", "gpt-4o", prompt_source="paper:loose")
    stage_sources(_stage_params({"loose": {"path": REL}}), plain, InferSettings(), "params.yaml")


def test_no_model_stage_declares_where_the_paper_files_come_from():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for name in ("infer", "listen"):
        body = stages[name].get("do") or stages[name]  # foreach (infer) or matrix (listen)
        declared = [str(p).split("#")[0].strip() for p in body["params"]]
        assert "paper.published" in declared and "paper.base_url" not in declared, (name, declared)


@pytest.mark.parametrize("url", ["http://user:pw-123456@127.0.0.1:9/AGL1K",
                                 "http://127.0.0.1:9/AGL1K?api_key=abc123456"])
def test_a_paper_url_with_a_credential_is_refused_before_any_request(url, tmp_path):
    cfg = _config(url, b"{}\n")
    with pytest.raises(AglError) as err:
        resolve_source("paper:demo", cache_dir=tmp_path / "cache", config=cfg)
    msg = str(err.value)
    assert "carries a credential" in msg and "pw-123456" not in msg and "abc123456" not in msg, msg
    assert "cannot fetch" not in msg  # refused, not tried
