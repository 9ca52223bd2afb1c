"""The frozen run configs: built from params sections by `from_params`, each field checked by
its rule (agl.core.checks), so a bad knob is one line naming its section and key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agl.counterfactual.effects import EffectsConfig
from agl.counterfactual.listen import ListenConfig
from agl.dataset.passed import clips_to_listen
from agl.errors import AglError
from agl.scoring.config import BOOTSTRAP, METRIC_BOOTSTRAP, EvaluateConfig

PARAMS = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text(encoding="utf-8"))


def test_the_repository_params_build_every_config():
    ev = EvaluateConfig.from_params(PARAMS["evaluate"], PARAMS["mlflow"])
    assert ev.protocols == tuple(PARAMS["evaluate"]["protocols"])
    assert ev.metric_bootstrap == PARAMS["evaluate"]["metric_bootstrap"]
    assert ev.experiment == PARAMS["mlflow"]["experiment"]
    listen = ListenConfig.from_params(PARAMS["counterfactual"], PARAMS["mlflow"])
    assert listen.level_bootstrap == PARAMS["counterfactual"]["level_bootstrap"]
    effects = EffectsConfig.from_params(PARAMS["counterfactual"])
    assert effects.models == tuple(PARAMS["counterfactual"]["models"])
    assert effects.permutations == PARAMS["counterfactual"]["permutations"]


@pytest.mark.parametrize(("build", "message"), [
    (lambda: EvaluateConfig.from_params({"metric_bootstrap": -1}), "params.yaml evaluate.metric_bootstrap: -1 is not"),
    (lambda: EvaluateConfig(seed=1.5), "params.yaml evaluate.seed: 1.5 is not a seed"),
    (lambda: EvaluateConfig(strict_refusal_km=0), "params.yaml evaluate.strict_refusal_km: 0 is not a positive"),
    (lambda: EvaluateConfig(protocols=()), "evaluate.protocols is empty"),
    (lambda: EvaluateConfig.from_params({"bootstrap": 10}), "unknown key(s) bootstrap"),
    (lambda: ListenConfig.from_params({"level_bootstrap": 0}), "params.yaml counterfactual.level_bootstrap: 0 is not"),
    (lambda: EffectsConfig.from_params({"min_support": 0}), "params.yaml counterfactual.min_support: 0 is not"),
])
def test_a_bad_knob_is_one_line_naming_it(build, message):
    with pytest.raises(AglError) as err:
        build()
    assert message in str(err.value)


def test_the_bootstrap_count_has_one_default():
    """A run's headline intervals have their own default (METRIC_BOOTSTRAP, where the printed
    digits are stable: docs/metrics.md#resamples); every other count shares BOOTSTRAP; and
    params.yaml sets what the code defaults to."""

    assert EvaluateConfig().metric_bootstrap == METRIC_BOOTSTRAP
    assert ListenConfig().level_bootstrap == EffectsConfig().effect_bootstrap == BOOTSTRAP
    params = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
    assert params["evaluate"]["metric_bootstrap"] == METRIC_BOOTSTRAP
    assert params["counterfactual"]["level_bootstrap"] == params["counterfactual"]["effect_bootstrap"] == BOOTSTRAP


def test_clips_to_listen_leaves_out_what_failed_the_filter(tmp_path):
    import pandas as pd

    manifest = pd.DataFrame({"key": ["a", "b", "c"], "mp3name": ["a.mp3", "b.mp3", "c.mp3"],
                             "latitude": 0.0, "longitude": 0.0, "mp3seconds": 1.0, "city": "",
                             "country": "", "continent": ""})
    table = tmp_path / "filter.csv"
    table.write_text("key,passed\na,True\nb,False\nc,True\n", encoding="utf-8")
    items, skipped = clips_to_listen(manifest, tmp_path / "audio", table, only_passed=True)
    assert [k for k, _ in items] == ["a", "c"] and skipped == 1
    assert items[0][1] == tmp_path / "audio" / "a" / "a.mp3"
    items, skipped = clips_to_listen(manifest, tmp_path / "audio", tmp_path / "absent.csv", only_passed=False)
    assert len(items) == 3 and skipped == 0
