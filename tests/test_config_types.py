"""A params value of the wrong type is one line naming its key (agl.core.checks.check_field_types).

Was: `speech.max_windows: four` ended the speech stage in a ValueError traceback from
`int('four')`, and `max_windows: 4.5` was cut to 4 without a word.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from helpers import run

from agl.birds.birdnet import BirdConfig
from agl.curation.tagging import TagConfig
from agl.errors import AglError
from agl.speech.listen import SpeechConfig

REPO = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())
CONFIGS = {"speech": SpeechConfig, "birds": BirdConfig, "tag": TagConfig}
WRONG = ("four", [1], {"a": 1}, 4.5, None, True)


@pytest.mark.parametrize("section", CONFIGS)
def test_every_key_given_a_wrong_value_is_refused_naming_it_or_taken(section):
    config = CONFIGS[section]
    config.from_params(PARAMS[section])  # the committed values pass
    for key in PARAMS[section]:
        for value in WRONG:
            try:
                config.from_params({**PARAMS[section], key: value})
            except AglError as exc:
                # (check_value's lines name it "section key", the field checks "section.key")
                assert str(exc).startswith((f"params.yaml {section}.{key}: ", f"params.yaml {section} {key}: ")), exc
                assert "\n" not in str(exc)


def _builders():
    from agl.counterfactual.effects import EffectsConfig
    from agl.counterfactual.listen import ListenConfig
    from agl.curation.filtering import FilterConfig
    from agl.curation.localizability_params import LocalizabilityConfig
    from agl.executor.config import ExecutorConfig
    from agl.report.inputs import ReportConfig
    from agl.scoring.config import EvaluateConfig

    return {"localizability": LocalizabilityConfig.from_params, "filter": FilterConfig.from_params,
            "report": ReportConfig.from_params, "evaluate": EvaluateConfig.from_params,
            "executor": ExecutorConfig.from_params, "counterfactual": ListenConfig.from_params,
            "counterfactual ": EffectsConfig.from_params}


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif path:
        yield path


def _with(node, path, value):
    node = yaml.safe_load(yaml.safe_dump(node))  # a deep copy
    cur = node
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value
    return node


@pytest.mark.parametrize("section", list(_builders()))
def test_no_value_of_any_section_ends_in_a_traceback(section):
    """Every leaf of the stages' other sections, given text, a fraction, a negative number, null,
    a boolean, a list or a mapping: built, or refused with an AglError (one line). Was: a
    TypeError or AttributeError traceback for `evaluate.protocols: 3`, `report.judge: gemini`,
    `counterfactual.models: null`, `localizability.gamma_km: {a: 1}`."""
    build, params = _builders()[section], PARAMS[section.strip()]
    build(params)
    for path in _leaves(params):
        for value in (*WRONG, -1):
            try:
                build(_with(params, path, value))
            except AglError as exc:
                assert "\n" not in str(exc)


@pytest.mark.parametrize(("key", "value", "words"), [
    ("max_windows", "four", "'four' is not a whole number of at least 1; e.g. `speech.max_windows: 4`"),
    ("threads", 2.5, "2.5 is not a whole number of at least 1; e.g. `speech.threads: 2`"),
    ("confident", "high", "'high' is not a share in (0, 1]; e.g. `speech.confident: 0.9`"),
    ("heard_cache", 3, "3 is not text or null; e.g. `heard_cache: cache/speech`"),
    ("model", None, "null is not text; e.g. `model: pypi-whisper-base`"),
    ("sha256", "abc", "'abc' is not a mapping of file name to SHA-256"),
])
def test_the_line_says_what_a_valid_value_is(key, value, words):
    with pytest.raises(AglError) as exc:
        SpeechConfig.from_params({**PARAMS["speech"], key: value})
    assert str(exc.value).startswith(f"params.yaml speech.{key}: {words}")


def test_an_integral_float_still_counts_as_a_whole_number():
    assert SpeechConfig.from_params({**PARAMS["speech"], "max_windows": 4.0}).max_windows == 4.0


def test_the_speech_stage_says_it_in_one_line(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"speech": {**PARAMS["speech"], "max_windows": "four"}}))
    done = run([sys.executable, str(REPO / "stages" / "speech.py"), "--manifest", str(tmp_path / "m.csv"),
                "--audio-root", str(tmp_path), "--filter", str(tmp_path / "f.csv"), "--out", str(tmp_path / "s.csv"),
                "--windows", str(tmp_path / "w.jsonl"), "--summary", str(tmp_path / "s.json"),
                "--params", str(params)], tmp_path, ok=False)
    assert done.stderr.strip().splitlines() == [
        f"speech.py: error: {params} speech.max_windows: 'four' is not a whole number of at least 1; "
        "e.g. `speech.max_windows: 4`"]


@pytest.mark.parametrize(("key", "value", "words"), [
    ("prompt", [1], "params.yaml: infer.prompt: [1] is not text; e.g. `prompt: default`"),
    ("cache_dir", [1], "params.yaml: infer.cache_dir: [1] is not text or null; e.g. `cache_dir: cache/responses`"),
    ("concurrency", "four", "params.yaml infer.concurrency: 'four' is not a whole number of at least 1; "
     "e.g. `infer.concurrency: 4`"),
])
def test_infer_settings_of_the_wrong_type_are_one_line(key, value, words):
    """Was: `infer.prompt: [1]` a TypeError traceback (unhashable list), `infer.cache_dir: [1]`
    another (not a path)."""
    from agl.inference.runspec import parse_infer

    with pytest.raises(AglError) as exc:
        parse_infer({**PARAMS["infer"], key: value})
    assert str(exc.value).startswith(words) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("key", "value", "words"), [
    ("protocol", ["paper"],
     "params.yaml leaderboard.protocol: ['paper'] is not a protocol; choose one of paper, strict"),
    ("max_refused", "four", "params.yaml leaderboard.max_refused: 'four' is not a share in [0, 1]"),
    ("refusal_note", [1], "params.yaml leaderboard.refusal_note: [1] is not a share in [0, 1]"),
])
def test_leaderboard_settings_of_the_wrong_type_are_one_line(tmp_path, key, value, words):
    """Was: a TypeError (a list as the protocol) or a ValueError (`float('four')`) traceback."""
    from agl.core.checks import check_params
    from agl.scoring.leaderboard import build

    section = {**PARAMS["leaderboard"], key: value}
    with pytest.raises(AglError) as exc:
        check_params("leaderboard", section)  # what the stage checks as it loads its params
        build([], section, base_url="", cache_dir=tmp_path, limits=None)
    assert str(exc.value).startswith(words), str(exc.value)


@pytest.mark.parametrize(("entry", "words"), [
    ({"kind": ["truncate"]}, "params.yaml: perturb.t.kind: choose one of "),
    ({"kind": "truncate", "seconds": "four"},
     "params.yaml perturb.t.seconds: 'four' is not a positive finite number or a non-empty list of them; "
     "e.g. `perturb.t.seconds: [3, 8]`"),
    ({"kind": "truncate", "seconds": None},
     "params.yaml perturb.t.seconds: null is not a positive finite number or a non-empty list of them"),
])
def test_an_intervention_of_the_wrong_type_is_one_line(entry, words):
    """Was: a TypeError traceback for a list as the kind, a ValueError one for `seconds: four`."""
    from agl.counterfactual.perturb import parse_perturb

    with pytest.raises(AglError) as exc:
        parse_perturb({"t": entry})
    assert str(exc.value).startswith(words), str(exc.value)


@pytest.mark.parametrize("runs", ["qwen25-omni", [1], ["qwen25-omni"]])
def test_paper_runs_that_are_not_a_list_of_runs_are_one_line(tmp_path, runs):
    """Was: an AttributeError traceback (`paper.runs: qwen25-omni` was read letter by letter)."""
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.paper_runs import reproduce_paper

    with pytest.raises(AglError, match=r"^params\.yaml paper\.runs: .* (is not a list of runs|is not a run)"):
        reproduce_paper({**PARAMS["paper"], "runs": runs}, EvaluateConfig(), tmp_path / "paper")


def test_a_path_naming_the_wrong_kind_of_thing_is_one_line(tmp_path):
    """Was: an IsADirectoryError traceback from `download.summary: <a folder>`; stages and
    commands print one line for it, as for a full disk (agl.core.diskwrite)."""
    from agl.core.diskwrite import disk_error

    folder, file = tmp_path / "a-folder", tmp_path / "a-file"
    folder.mkdir()
    file.write_text("x")
    for path in (folder, file / "below"):
        try:
            path.write_text("y")
        except OSError as exc:
            err = disk_error(exc)
        assert err is not None and str(err).startswith(f"{path}: ") and "\n" not in str(err)
    assert "folder where a file belongs" in str(disk_error(IsADirectoryError(21, "Is a directory", str(folder))))


@pytest.mark.parametrize(("backend", "settings", "words"), [
    ("knn", {"k": "four"}, "knn setting k: 'four' is not a whole number of at least 1; e.g. `k: 1`"),
    ("knn", {"k": 1.5}, "knn setting k: 1.5 is not a whole number of at least 1"),
    ("knn", {"max_seconds": None}, "knn setting max_seconds: null is not a positive finite number"),
    ("birdrange", {"floor": "low"}, "birdrange setting floor: 'low' is not a share strictly between 0 and 1"),
    ("gemini", {"upload_above_bytes": [1], "api_key_env": "AGL_TEST_NO_SUCH_KEY"},
     "gemini setting upload_above_bytes: [1] is not a whole number, 0 or more"),
])
def test_a_model_setting_of_the_wrong_type_is_one_line(backend, settings, words, monkeypatch):
    """A `models:` entry's numeric settings. Was: `k: four` a ValueError traceback from int(),
    `k: 1.5` silently one neighbour."""
    from agl.backends.base import get_backend

    monkeypatch.setenv("AGL_TEST_NO_SUCH_KEY", "not-a-real-key")
    with pytest.raises(AglError) as exc:
        get_backend(backend)(**({"model": "m"} if backend == "gemini" else {}), **settings)
    assert str(exc.value).startswith(words), str(exc.value)


def test_the_cost_estimate_refuses_a_rate_that_is_no_number():
    from agl.contracts.models import ModelSpec
    from agl.inference.estimate import estimate

    spec = ModelSpec("m", "gemini", "m", settings={"audio_tokens_per_s": "fast"}, price_in_per_m=1.0,
                     price_out_per_m=1.0)
    with pytest.raises(AglError, match=r"^model setting audio_tokens_per_s: 'fast' is not a finite number, 0 or more"):
        estimate([], spec, audio_root=None, prompt_text="prompt")
