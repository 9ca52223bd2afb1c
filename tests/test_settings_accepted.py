"""Every setting that is accepted does what it says (issue 50, and issue 49 item 8): a model
entry's `settings:` keys are the backend's own declared list (misspelt ones refused with "did
you mean"), each numeric setting by its rule; `filter.jobs: 1.5` is no whole number;
`--retries 0` with --entry is refused as `--retries 1` is; an unknown top-level section of
params.yaml (`evalute:`) is refused. Each case ran before on the default without a word."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import run_agl
from test_inference_api import make_clips

from agl.backends import available_backends, get_backend
from agl.core.checks import RULES, SECTIONS, check_sections, declared_sections
from agl.curation.filtering import FilterConfig
from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]


def test_every_backend_declares_its_settings_with_known_rules():
    for name in available_backends():
        rules = get_backend(name).settings_rules
        assert rules, f"{name}: declares no settings"
        assert all(r is None or r in RULES for r in rules.values()), name


@pytest.mark.parametrize("backend, settings, expected", [
    ("knn", {"kk": 3}, "models.m.settings (knn backend): unknown key(s) kk; known: "),
    ("knn", {"kk": 3}, "; did you mean k (for kk)?"),
    ("knn", {"k": 1.5}, "models.m.settings (knn backend): k: 1.5 is not a whole number of at least 1"),
    ("random", {"sed": 1}, "did you mean seed (for sed)?"),
    ("gemini", {"temprature": 0}, "did you mean temperature (for temprature)?"),
    ("gemini", {"top_p": 2}, "top_p: 2 is not a share in [0, 1]"),
    ("openai", {"max_tokens": 0.5}, "max_tokens: 0.5 is not a whole number of at least 1"),
    ("transformers", {"do_sample": "yes"}, "do_sample: 'yes' is not true or false"),
    # a wrapper's own keys, then the wrapped backend's
    ("blind", {"of": "gemini", "inputs": "none", "temprature": 0}, "did you mean temperature (for temprature)?"),
    ("cascade", {"text_backend": "openai", "max_transcript_chars": 0}, "max_transcript_chars: 0 is not"),
])
def test_a_setting_the_backend_does_not_read_is_refused(backend, settings, expected):
    with pytest.raises(AglError) as info:
        get_backend(backend).check_settings(settings, f"models.m.settings ({backend} backend)")
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_every_shipped_entry_passes_its_backends_list():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for name, entry in params["models"].items():
        get_backend(entry["backend"]).check_settings(entry.get("settings") or {}, name)


def _entry_params(tmp_path: Path, settings: dict) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["models"] = {"g": {"backend": "gemini", "model": "gemini-2.5-flash", "settings": settings}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_a_misspelt_setting_stops_agl_infer_before_a_cost_is_printed(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "x")
    manifest, audio = make_clips(tmp_path, 2)
    rc, out, err = run_agl("infer", "--entry", "g", "--params", str(_entry_params(tmp_path, {"temprature": 0})),
                           "--manifest", str(manifest), "--audio-root", str(audio),
                           "--out", str(tmp_path / "run"), "--dry-run")
    assert rc == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert "models.g.settings (gemini backend): unknown key(s) temprature" in err
    assert "did you mean temperature (for temprature)?" in err


@pytest.mark.parametrize("retries", ["0", "1"])
def test_retries_with_an_entry_is_refused_whatever_the_count(tmp_path, retries):
    """`--retries 0` equals False and was dropped silently (6 attempts ran); `--retries 1`
    was refused: both now say the entry decides."""
    manifest, audio = make_clips(tmp_path, 1)
    rc, out, err = run_agl("infer", "--entry", "g", "--params", str(_entry_params(tmp_path, {})),
                           "--manifest", str(manifest), "--audio-root", str(audio),
                           "--out", str(tmp_path / "run"), "--retries", retries, "--dry-run")
    assert rc == 2 and "drop --retries" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("value", [1.5, True, "2"])
def test_filter_jobs_is_a_whole_number(value):
    with pytest.raises(AglError, match=r"params.yaml filter.jobs: .* is not a whole number of at least 1; "
                                       r"e.g. `filter.jobs: 1`"):
        FilterConfig.from_params({"jobs": value})
    assert FilterConfig.from_params({"jobs": 3.0}).jobs == 3  # an integral float is whole


def test_every_shipped_section_is_known_and_a_typo_is_refused(tmp_path):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert set(params) <= SECTIONS and declared_sections(REPO / "dvc.yaml") <= SECTIONS
    check_sections(params, REPO / "params.yaml")
    with pytest.raises(AglError) as info:
        check_sections({**params, "evalute": {"seed": 1}}, tmp_path / "params.yaml")
    msg = str(info.value)
    assert "top-level section: unknown key(s) evalute" in msg and "did you mean evaluate (for evalute)?" in msg


def test_a_stage_refuses_an_unknown_section(tmp_path):
    """Through a stage's own reader (stages/_params.py): one line, non-zero exit."""
    text = (REPO / "params.yaml").read_text() + "evalute:\n  metric_bootstrap: 10\n"
    (tmp_path / "params.yaml").write_text(text)
    code = ("import sys; sys.path.insert(0, 'stages'); import _params; "
            f"_params.load('evaluate', path={str(tmp_path / 'params.yaml')!r})")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "did you mean evaluate (for evalute)?" in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0


def test_retries_zero_is_one_attempt_through_the_flags_and_through_params(tmp_path, monkeypatch):
    """`--retries 0` (flags) and `infer.max_retries: 0` (an entry) each send one request per
    clip to a server answering 500: honoured the same way (the entry refuses the flag above)."""
    from fake_llm import Answer, FakeServer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    manifest, audio = make_clips(tmp_path, 2)
    with FakeServer(lambda call: Answer(500, {"error": {"message": "down"}})) as server:
        common = ["--manifest", str(manifest), "--audio-root", str(audio), "--no-progress"]
        rc, _, err = run_agl("infer", "--backend", "openai", "--model", "m", "--base-url", server.url + "/v1",
                             "--setting", "temperature=0", "--retries", "0", "--cache-dir",
                             str(tmp_path / "c1"), "--out", str(tmp_path / "a"), *common)
        assert len(server.calls) == 2, (rc, err)
        params = yaml.safe_load((REPO / "params.yaml").read_text())
        params["infer"].update(max_retries=0, cache_dir=str(tmp_path / "c2"))
        params["models"] = {"o": {"backend": "openai", "model": "m",
                                  "settings": {"base_url": server.url + "/v1", "temperature": 0}}}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        run_agl("infer", "--entry", "o", "--params", str(tmp_path / "params.yaml"),
                "--out", str(tmp_path / "b"), *common)
        assert len(server.calls) == 4


@pytest.mark.parametrize("key, value", [("concurrency", 1.5), ("max_retries", 0.5), ("timeout_s", -1)])
def test_the_judges_counts_are_whole(key, value):
    from agl.judges.modes import judge_from_config

    with pytest.raises(AglError, match=rf"params report.judge: {key}: {value!r} is not"):
        judge_from_config({"backend": "openai", "model": "m", key: value})
    assert judge_from_config({"backend": "openai", "model": "m", "concurrency": 2.0}).concurrency == 2
