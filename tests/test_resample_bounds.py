"""Every resample and permutation count has an upper bound, `evaluate.max_resamples` (issue 35):
checked before any work, from params.yaml and from `--bootstrap`, in one line naming where the
value came from, the key, the value and the allowed range. Was: `agl evaluate --bootstrap
1000000000` and `evaluate.metric_bootstrap: 1e12` ran past two minutes and a gigabyte.
Each test proves the refusal is quick by finishing: before the bound, each one ran for minutes.
"""

from __future__ import annotations

import math

import pytest
import yaml
from factories import manifest, prediction
from helpers import one_line_error

from agl.cli import main
from agl.core.checks import MAX_RESAMPLES
from agl.counterfactual.effects import EffectsConfig
from agl.counterfactual.listen import ListenConfig
from agl.dataset.manifest import write_manifest
from agl.errors import AglError
from agl.predictions.records import PredictionWriter
from agl.report.inputs import ReportConfig
from agl.scoring.config import EvaluateConfig

HUGE = 1_000_000_000
RANGE = f"the allowed range 1 to {MAX_RESAMPLES}"



@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the default bound
    m = tmp_path / "manifest.csv"
    write_manifest(manifest([{"key": f"k{i}"} for i in range(3)]), m)
    preds = tmp_path / "predictions.jsonl"
    with PredictionWriter(preds) as w:
        for i in range(3):
            w.write(prediction(f"k{i}", 48.9, 2.3, "Paris", "France", "Europe"))
    return m, preds


@pytest.mark.parametrize("command", ["evaluate", "power"])
def test_a_bootstrap_flag_past_the_bound_is_one_line(files, capfd, command):
    m, preds = files
    extra = [str(preds)] if command == "power" else []
    line = one_line_error(capfd, [command, str(preds), *extra, "--manifest", str(m), "--bootstrap", str(HUGE)])
    low = 0 if command == "evaluate" else 1
    assert f"--bootstrap {HUGE}: outside the allowed range {low} to {MAX_RESAMPLES}" in line, line
    assert "evaluate.max_resamples" in line


def test_the_flag_follows_params_yaml_bound(files, tmp_path, capfd):
    m, preds = files
    (tmp_path / "params.yaml").write_text("evaluate:\n  max_resamples: 50\n")
    line = one_line_error(capfd, ["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "51"])
    assert "--bootstrap 51: outside the allowed range 0 to 50 (params.yaml's evaluate.max_resamples" in line
    assert main(["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "50", "--json"]) == 0


def test_a_report_count_in_params_past_the_bound_is_one_line(files, tmp_path, capfd):
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"report": {"paired_permutations": HUGE}}))
    line = one_line_error(capfd, ["report", "--params", str(params), "--runs", str(tmp_path / "none"),
                            "--out", str(tmp_path / "out"), "--no-track"])
    assert line.startswith(f"agl report: error: {params} report.paired_permutations: {HUGE} is not a whole number "
                           f"in {RANGE} (evaluate.max_resamples"), line
    assert not (tmp_path / "out").exists()
    line = one_line_error(capfd, ["report", "--params", str(params), "--bootstrap", str(HUGE)])
    assert f"--bootstrap {HUGE}: outside {RANGE}" in line


@pytest.mark.parametrize("value", [HUGE, 1e12])
def test_export_refuses_evaluate_metric_bootstrap_past_the_bound(files, tmp_path, capfd, value):
    m, _ = files
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"evaluate": {"metric_bootstrap": value}}))
    line = one_line_error(capfd, ["export", "eee", "--params", str(params), "--manifest", str(m),
                            "--out", str(tmp_path / "eee")])
    assert f"{params} evaluate.metric_bootstrap: {value!r} is not a whole number in the allowed range 1 to" in line


@pytest.mark.parametrize(("build", "key"), [
    (lambda v: EvaluateConfig.from_params({"metric_bootstrap": v}), "evaluate.metric_bootstrap"),
    (lambda v: ReportConfig.from_params({"group_bootstrap": v}), "report.group_bootstrap"),
    (lambda v: ReportConfig.from_params({"factor_bootstrap": v}), "report.factor_bootstrap"),
    (lambda v: ReportConfig.from_params({"paired_bootstrap": v}), "report.paired_bootstrap"),
    (lambda v: ReportConfig.from_params({"paired_permutations": v}), "report.paired_permutations"),
    (lambda v: EffectsConfig.from_params({"effect_bootstrap": v}), "counterfactual.effect_bootstrap"),
    (lambda v: EffectsConfig.from_params({"permutations": v}), "counterfactual.permutations"),
    (lambda v: ListenConfig.from_params({"level_bootstrap": v}), "counterfactual.level_bootstrap"),
])
def test_every_count_in_params_is_bounded_in_its_from_params(build, key):
    for huge in (HUGE, 1e12):  # 1e12: an integral float, as YAML's 1.0e+12 loads
        with pytest.raises(AglError) as err:
            build(huge)
        line = str(err.value)
        assert "\n" not in line and line.startswith(f"params.yaml {key}: {huge!r} is not a whole number in"), line
        assert f"to {MAX_RESAMPLES} (evaluate.max_resamples" in line
    for bad in (math.nan, True, "1e12", 2.5):  # no count at all: refused by the field's rule
        with pytest.raises(AglError, match=key.split(".")[1]):
            build(bad)
    build(MAX_RESAMPLES)  # the bound itself is allowed


def test_the_bound_is_a_param_checked_itself():
    assert EvaluateConfig.from_params({"metric_bootstrap": 20, "max_resamples": 20}).max_resamples == 20
    with pytest.raises(AglError, match="metric_bootstrap: 21 is not a whole number in the allowed range 1 to 20"):
        EvaluateConfig.from_params({"metric_bootstrap": 21, "max_resamples": 20})
    for bad in (0, math.nan, True, "1e5"):
        with pytest.raises(AglError, match="params.yaml evaluate.max_resamples: .* is not a whole number of at le"):
            EvaluateConfig.from_params({"max_resamples": bad})
    with pytest.raises(AglError, match="report.group_bootstrap: 30 is not a whole number in the allowed range 1 to 20"):
        ReportConfig.from_params({"group_bootstrap": 30}, max_resamples=20)


def test_an_imported_record_asking_for_too_many_resamples_is_refused(tmp_path):
    """An EEE record is outside input: its `num_bootstrap_samples` is what `agl import` would
    run; was: 1e9 accepted from a record."""
    from agl.interchange.eee_import import ImportConfig, _bootstrap

    record = {"evaluation_results": [{"score_details": {"uncertainty": {"num_bootstrap_samples": HUGE}}}]}
    path = tmp_path / "record.json"
    with pytest.raises(AglError) as err:
        _bootstrap(record, ImportConfig(), path)
    assert str(err.value).startswith(f"{path} evaluation_results[0].score_details.uncertainty."
                                     f"num_bootstrap_samples: {HUGE} is not a whole number in the allowed range 0 to")
    record["evaluation_results"][0]["score_details"]["uncertainty"]["num_bootstrap_samples"] = 200
    assert _bootstrap(record, ImportConfig(), path)[0] == 200
