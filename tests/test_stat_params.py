"""Statistical knobs are checked before use, in params.yaml and on the command line: one line
naming the key, never a run with null intervals or a numpy traceback (issue 23)."""

from __future__ import annotations

import re
import sys

import pytest
import yaml
from factories import manifest, prediction
from helpers import REPO

from agl.cli import main
from agl.core.checks import PARAMS, check_params
from agl.errors import AglError

sys.path.insert(0, str(REPO / "stages"))
import _params  # noqa: E402  (the stages' params reader)

PARAMS_YAML = yaml.safe_load((REPO / "params.yaml").read_text())


def concrete(pattern: str) -> list[str]:
    """The keys of params.yaml a pattern stands for (`perturb.*.seed` -> each intervention's)."""
    out = []

    def walk(prefix: str, node) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif prefix.count(".") == pattern.count(".") and re.fullmatch(
                pattern.replace(".", r"\.").replace("*", r"[^.]+"), prefix):
            out.append(prefix)

    walk("", PARAMS_YAML)
    return out


def write_params(tmp_path, key: str, value) -> object:
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    node = doc
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_negative_metric_bootstrap_stops_the_stage_naming_the_key(tmp_path):
    # On main this loaded, and every CI of every run came out null.
    path = write_params(tmp_path, "evaluate.metric_bootstrap", -5)
    with pytest.raises(AglError) as err:
        _params.load("evaluate", "mlflow", path=path)
    msg = str(err.value)
    assert "\n" not in msg and "evaluate.metric_bootstrap: -5" in msg
    assert "whole number of at least 1" in msg and "evaluate.metric_bootstrap: 1000" in msg


@pytest.mark.parametrize("bad", [-5, 0, 2.5, "1e3", True])
@pytest.mark.parametrize("key", ["evaluate.metric_bootstrap", "report.paired_permutations",
                                 "counterfactual.level_bootstrap", "counterfactual.min_support",
                                 "report.min_support", "report.factor_bootstrap"])
def test_counts_must_be_whole_numbers_of_at_least_one(tmp_path, key, bad):
    section = key.rsplit(".", 1)[0]
    path = write_params(tmp_path, key, bad)
    with pytest.raises(AglError, match=re.escape(key)):
        _params.load(section, path=path)


@pytest.mark.parametrize("key", [k for pattern, (rule, _) in PARAMS.items() if rule == "seed"
                                 for k in concrete(pattern)])
@pytest.mark.parametrize("bad", [-1, 0.5, "zero"])
def test_every_seed_of_params_yaml_is_checked(tmp_path, key, bad):
    path = write_params(tmp_path, key, bad)
    with pytest.raises(AglError, match=re.escape(key)):
        _params.load(key.split(".")[0], path=path)


def test_the_shipped_params_pass_and_every_rule_names_a_real_key():
    for pattern in PARAMS:
        keys = concrete(pattern)
        # (executor.models.*.ray.*: a model's executor overrides take executor.ray's rules; the
        # shipped params.yaml sets none)
        if not pattern.startswith(("models.", "localizability.target_size", "executor.models.")):
            assert keys, f"{pattern} names no key of params.yaml"
    for section, node in PARAMS_YAML.items():
        check_params(section, node)


def test_every_statistical_key_of_params_yaml_has_a_rule():
    looks_statistical = re.compile(
        r"(bootstrap|seed|permutations|min_support|min_events|coverage|_clips|bins|maps_for|"
        r"fraction|share|_size|_km)$")
    ruled = {k for pattern in PARAMS for k in concrete(pattern)}
    found = [k for k in concrete_all() if looks_statistical.search(k.rsplit(".", 1)[-1])]
    exempt = {"tag.batch_size", "birds.batch_size", "localizability.judge_cache", "speech.beam_size"}
    missing = [k for k in found if k not in ruled and k not in exempt]
    assert not missing, f"add these to agl.core.checks.PARAMS: {missing}"


def concrete_all() -> list[str]:
    out = []

    def walk(prefix: str, node) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out.append(prefix)

    walk("", PARAMS_YAML)
    return out


def test_report_options_refuse_what_int_would_have_bent():
    from agl.report.inputs import options_from_config

    with pytest.raises(AglError, match=r"report\.min_support: 2\.5"):
        options_from_config({"min_support": 2.5})  # int(2.5) == 2 on main, silently
    with pytest.raises(AglError, match=r"report\.group_bootstrap: -5"):
        options_from_config({"group_bootstrap": -5})
    assert options_from_config({"group_bootstrap": 1000.0}).group_bootstrap == 1000


def test_localizability_and_download_sections_check_their_seeds():
    from agl.curation.localizability_params import LocalizabilityConfig
    from agl.dataset.prepare import from_params

    with pytest.raises(AglError, match=r"localizability\.seed: -1"):
        LocalizabilityConfig.from_params({"seed": -1})
    with pytest.raises(AglError, match=r"localizability\.min_clips_per_side: 0"):
        LocalizabilityConfig.from_params({"min_clips_per_side": 0})
    with pytest.raises(AglError, match=r"download\.demo_seed: -3"):
        from_params({"download": {"demo_seed": -3}})


def test_the_random_baseline_checks_its_seed():
    from agl.backends.base import get_backend

    with pytest.raises(AglError, match="seed"):
        get_backend("random")("uniform-latlon", seed="abc")  # a ValueError traceback on main


@pytest.mark.parametrize("argv,what", [
    (["--bootstrap", "-5"], "argument --bootstrap: '-5' is not a whole number, 0 or more"),
    (["--seed", "-1"], "argument --seed: '-1' is not a seed"),  # a numpy traceback on main
    (["--bootstrap", "1.5"], "argument --bootstrap: '1.5' is not a whole number"),
])
def test_evaluate_command_line_knobs(tmp_path, capfd, argv, what):
    from agl.dataset.manifest import write_manifest
    from agl.predictions.records import PredictionWriter

    m = tmp_path / "m.csv"
    write_manifest(manifest([{}, {"key": "k1"}]), m)
    preds = tmp_path / "p.jsonl"
    with PredictionWriter(preds) as w:
        w.write(prediction("k0", 48.9, 2.3, "Paris", "France", "Europe"))
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", str(preds), "--manifest", str(m), *argv])
    assert exit_.value.code == 2
    err = capfd.readouterr().err
    assert what in err and "Traceback" not in err


def test_report_command_line_bootstrap(capfd):
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--bootstrap", "0"])
    assert exit_.value.code == 2 and "argument --bootstrap" in capfd.readouterr().err


def test_the_library_guards_its_own_resampling():
    from agl.predictions.records import prediction_frame
    from agl.scoring.evaluate import evaluate_frames

    m = manifest([{}])
    frame = prediction_frame([prediction("k0", 48.9, 2.3, "Paris", "France", "Europe")])
    with pytest.raises(AglError, match="bootstrap: -5"):
        evaluate_frames(m, frame, "paper", bootstrap=-5)
    with pytest.raises(AglError, match="seed: -1"):
        evaluate_frames(m, frame, "paper", bootstrap=10, seed=-1)
