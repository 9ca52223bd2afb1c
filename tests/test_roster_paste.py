"""The paper's roster runs as pasted (issue 23): every entry `agl models --yaml NAME` prints,
pasted under `models:` of a copy of params.yaml, passes real `dvc status` (DVC reads the dot
of `gemini-2.5-flash` as nesting: no roster name has one) and `agl infer --entry NAME
--dry-run`, offline: a prompt that would be downloaded is named, not fetched."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import copy_repo, run_agl, subprocess_env
from test_inference_api import make_clips

from agl.contracts.models import parse_models
from agl.errors import AglError
from agl.inference.roster import PAPER_PROMPT_SOURCE, load_roster


@functools.cache
def roster_names() -> tuple[str, ...]:
    """The roster's 16 names (read when a test asks: checking the roster loads every backend,
    torch and transformers among them, which collection need not pay for)."""
    return tuple(r.spec.name for r in load_roster())


def paste_roster(params: Path) -> None:
    """What a user does: each `agl models --yaml NAME` output pasted under `models:`."""
    fragments = []
    for name in roster_names():
        rc, out, err = run_agl("models", "--yaml", name)
        assert rc == 0, err
        assert not out.startswith("models:"), "the fragment must not bring its own header"
        fragments.append(out)
    text = params.read_text(encoding="utf-8")
    assert text.count("\nmodels:\n") == 1
    params.write_text(text.replace("\nmodels:\n", "\nmodels:\n" + "".join(fragments)),
                      encoding="utf-8")


@pytest.fixture(scope="module")
def pasted(tmp_path_factory):
    work = copy_repo(tmp_path_factory.mktemp("paste") / "repo")
    paste_roster(work / "params.yaml")
    return work


def test_the_roster_has_no_dotted_names_and_the_authors_prompt_resolves():
    assert len(roster_names()) == 16 and not [n for n in roster_names() if "." in n]
    for r in load_roster():
        assert r.spec.prompt == "agl1k-paper" and r.spec.prompt_source == PAPER_PROMPT_SOURCE
    # The paper's spelling still finds an entry; the printed key is the valid one.
    rc, out, _ = run_agl("models", "--yaml", "gemini-2.5-flash")
    assert rc == 0 and out.splitlines()[1] == "  gemini-25-flash:"


def test_every_pasted_entry_parses_and_dvc_status_accepts_it(pasted):
    models = yaml.safe_load((pasted / "params.yaml").read_text())["models"]
    assert set(roster_names()) <= set(models)
    assert {s.name for s in parse_models(models)} >= set(roster_names())
    env = subprocess_env(pasted)
    subprocess.run("git init -q", cwd=pasted, shell=True, check=True, env=env)
    r = subprocess.run(["dvc", "status", "--json"], cwd=pasted, capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    status = json.loads(r.stdout)
    for name in roster_names():  # one infer and one evaluate stage each, nothing refused
        assert f"infer@{name}" in status and f"evaluate@{name}" in status, name


def test_every_pasted_entry_dry_runs_offline(pasted, tmp_path, monkeypatch):
    import agl.dataset.paper

    def no_network(url, *a, **k):
        raise AssertionError(f"a dry run fetched {url}")

    monkeypatch.setattr(agl.dataset.paper, "fetch", no_network)
    monkeypatch.chdir(pasted)  # params.yaml's paper: section names the authors' repository
    manifest, audio = make_clips(tmp_path, 3)
    for name in roster_names():
        rc, out, err = run_agl("infer", "--entry", name, "--params", str(pasted / "params.yaml"),
                               "--manifest", str(manifest), "--audio-root", str(audio),
                               "--out", str(tmp_path / "runs" / name), "--dry-run")
        assert rc == 0, (name, err)
        assert out.startswith("dry run: ") and "3 request(s)" in out, out
        # Not fetched, and said so: which short name, from where.
        assert "not fetched in a dry run" in out and PAPER_PROMPT_SOURCE in out, out
        assert "qwen25-omni/seed_42_progress_fixed.json" in out, out
        assert not (tmp_path / "runs" / name).exists() or not any((tmp_path / "runs" / name).iterdir())


def test_the_authors_prompt_resolves_from_a_mirror(pasted, tmp_path, qwen_published, monkeypatch):
    """The pinned file through a local mirror (a file URL, as `paper.base_url` allows): the
    real prompt text, its SHA-256 checked, cached, then counted by the dry run."""
    params = yaml.safe_load((pasted / "params.yaml").read_text())
    rel = params["paper"]["published"]["qwen25-omni"]["path"]
    mirror = tmp_path / "mirror"
    (mirror / rel).parent.mkdir(parents=True)
    shutil.copy(qwen_published, mirror / rel)
    params["paper"]["base_url"] = mirror.as_uri()
    work = tmp_path / "repo"
    work.mkdir()
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.chdir(work)
    from agl.prompts import load_prompt

    prompt = load_prompt("agl1k-paper", source=PAPER_PROMPT_SOURCE)
    assert prompt.text.startswith("You are an expert audio analyst") and '""' not in prompt.text
    assert list((work / "cache" / "sources").rglob("seed_42_progress_fixed.json"))
    manifest, audio = make_clips(tmp_path, 2)
    rc, out, err = run_agl("infer", "--entry", "gpt-4o-audio-preview", "--manifest",
                           str(manifest), "--audio-root", str(audio), "--out",
                           str(tmp_path / "run"), "--dry-run")
    assert rc == 0 and "2 request(s)" in out and "not fetched" not in out, out + err


def test_a_dotted_model_name_is_refused_in_one_line():
    with pytest.raises(AglError) as exc:
        parse_models({"gemini-2.5-flash": {"backend": "gemini", "model": "gemini-2.5-flash"}})
    msg = str(exc.value)
    assert "\n" not in msg and "contains a dot" in msg and "'gemini-25-flash'" in msg, msg


def test_agl_models_names_itself_once():
    rc, out, err = run_agl("models", "--yaml", "no-such-model")
    assert rc == 2 and err.count("agl models:") == 1 and "known: gemini-3-pro" in err, err
