"""One rule per setting: the params check (agl.core.checks.PARAMS, what every stage checks
as it loads its sections) and the config that reads the key agree on every key of
params.yaml: a value one accepts the other accepts, a value one refuses the other refuses,
in the same line. The walk found `evaluate.metric_bootstrap` (>= 1 in the table, 0 allowed by
EvaluateConfig), seeds of perturb.* (-1 read), counterfactual.subset and infer.offline_after
(never checked by their readers) and download's own type lines before the table's; then 82 keys
of params.yaml with no rule at all (download.jobs took `true` as 1), now in the table."""

from __future__ import annotations

import copy
import fnmatch
from pathlib import Path

import pytest
import yaml

from agl.core.checks import check_params, param_rule
from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
# (null is left out: a stage reads a key set to null as a key left out, its default)
PROBES = (-1, 0, 0.5, 1, 2.5, True, "x")


def _readers():
    """Each section (or key) of params.yaml -> the config reader its stage calls."""
    from agl.birds.birdnet import BirdConfig
    from agl.counterfactual.effects import EffectsConfig, Subset
    from agl.counterfactual.listen import KEYS, ListenConfig
    from agl.counterfactual.perturb import parse_perturb
    from agl.curation.filtering import FilterConfig
    from agl.curation.localizability_params import LocalizabilityConfig
    from agl.curation.tagging import TagConfig
    from agl.dataset.fingerprints import DuplicatesConfig
    from agl.dataset.prepare import from_params as download
    from agl.dataset.sources import SourceConfig
    from agl.executor.config import ExecutorConfig
    from agl.inference.runspec import parse_infer
    from agl.report.inputs import ReportConfig
    from agl.scoring import leaderboard
    from agl.scoring.config import EvaluateConfig
    from agl.speech.listen import SpeechConfig

    def counterfactual(p):
        EffectsConfig.from_params(p["counterfactual"])
        ListenConfig.from_params({k: p["counterfactual"].get(k) for k in KEYS})

    return {
        "evaluate": lambda p: EvaluateConfig.from_params(p["evaluate"]),
        "counterfactual.subset": lambda p: Subset.from_params(p["counterfactual"]["subset"]),
        "counterfactual": counterfactual,
        "report": lambda p: ReportConfig.from_params(p["report"]),
        "filter": lambda p: FilterConfig.from_params(p["filter"]),
        "tag": lambda p: TagConfig.from_params(p["tag"]),
        "speech": lambda p: SpeechConfig.from_params(p["speech"]),
        "birds": lambda p: BirdConfig.from_params(p["birds"]),
        "duplicates": lambda p: DuplicatesConfig.from_params(p["duplicates"]),
        "localizability": lambda p: LocalizabilityConfig.from_params(p["localizability"]),
        "executor": lambda p: ExecutorConfig.from_params(p["executor"]),
        "infer": lambda p: parse_infer(p["infer"]),
        "download": lambda p: download(p, progress=False),
        "perturb": lambda p: parse_perturb(p["perturb"]),
        "paper": SourceConfig.from_params,
        # the stage's table build over no runs: what it checks before it reads any
        "leaderboard": lambda p: leaderboard.build([], p["leaderboard"], base_url="", cache_dir=REPO / "nowhere",
                                                   limits=None),
    }


# Keys whose reader is no pure config (a model entry's settings are its backend's;
# `counterfactual.jobs`, handed by the perturb stage to the executor as it is): the stage's
# params check is their one check. A key without a rule in the table is checked by its reader
# alone (its type, its choices).
NO_READER = ("models.", "data.", "mlflow.", "export.", "counterfactual.jobs")


def _leaves(prefix: str, node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(f"{prefix}.{k}" if prefix else k, v)
    else:
        yield prefix, node


def _set(doc: dict, key: str, value) -> dict:
    out = copy.deepcopy(doc)
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    return out


def _line(fn, *args) -> str | None:
    try:
        fn(*args)
    except AglError as exc:
        return str(exc)
    return None


def _reader(readers: dict, key: str):
    for name in sorted(readers, key=len, reverse=True):  # the most specific section first
        if key == name or key.startswith(name + "."):
            return name, readers[name]
    return None, None


def test_the_params_check_and_every_config_agree_on_every_ruled_key_of_params_yaml():
    readers = _readers()
    ruled = [(k, v) for k, v in _leaves("", PARAMS) if param_rule(k) and not k.startswith(NO_READER)]
    assert len(ruled) > 40  # the walk reaches the table
    disagree = []
    for key, _ in ruled:
        section, read = _reader(readers, key)
        assert read is not None, f"{key}: no reader known to this test"
        for value in PROBES:
            doc = _set(PARAMS, key, value)
            node = doc
            for part in section.split("."):
                node = node[part]
            table = _line(check_params, section, node)
            config = _line(read, doc)
            if table is not None and config != table:
                disagree.append(f"{key}={value!r}: table: {table}\n  config: {config}")
            elif table is None and config is not None and config.split(":")[0].endswith(key):
                # A refusal naming another key is a rule between keys (gamma_km below
                # error_cap_km, a count above max_resamples), which no one key's rule holds.
                disagree.append(f"{key}={value!r}: the table accepts it; config: {config}")
    assert not disagree, "\n".join(disagree)


# Keys of params.yaml that no rule of the table holds, each group with its reason. The table
# holds numbers and switches (true/false): what a run's meaning or cost rests on. What it
# leaves to the key's reader is text and structure, which that reader checks with more to say
# than a rule could (the allowed choices by name, a path where it is opened, a model name
# against models:).
EXEMPT: dict[str, tuple[str, ...]] = {
    "a choice or a name: its reader refuses a value outside its list and names the allowed ones": (
        "data.dataset", "tag.tagger", "tag.checkpoint", "tag.pooling", "tag.device", "tag.speech",
        "speech.model", "speech.device", "speech.compute_type", "speech.cpu_isa",
        "localizability.features", "localizability.speech_from", "infer.prompt", "executor.kind",
        "evaluate.labels", "evaluate.point_land", "evaluate.resampling_unit", "report.resampling_unit",
        "counterfactual.resampling_unit", "leaderboard.protocol", "report.protocol",
        "counterfactual.protocol", "counterfactual.format", "perturb.*.kind", "perturb.*.fill",
        "mlflow.experiment", "export.organization"),
    "a path: text to its config (check_field_types), opened (and named when missing) where used": (
        "download.out", "download.summary", "tag.ontology", "tag.ontology_cache", "speech.cache_dir",
        "speech.heard_cache", "localizability.reference", "localizability.judge_cache",
        "infer.cache_dir", "infer.prompt_source", "paper.manifest", "paper.cache_dir",
        "paper.published.*.path", "leaderboard.paper_values", "report.explorer"),
    "a URL or an address, checked by the HTTP layer / Ray as it connects": (
        "download.manifest_url", "download.base_url", "download.metadata_url", "paper.base_url",
        "executor.ray.address"),
    "a SHA-256: agl.core.checks.sha256_value's own line (64 hex digits)": (
        "download.manifest_sha256", "paper.published.*.sha256"),
    "a list of hosts: agl.http's check_redirect_hosts": ("download.redirect_hosts", "paper.redirect_hosts"),
    "a list of names, checked against what exists (models:, perturb:, protocols) by its reader": (
        "evaluate.protocols", "localizability.judges", "counterfactual.models",
        "counterfactual.interventions", "counterfactual.long_audio", "paper.runs"),
    # model settings are backend-specific: each backend checks its own numbers through the
    # table's RULES (agl.core.checks.number_setting); the one setting every seeded backend
    # shares, `models.*.settings.seed`, has its rule in the table
    "a model entry: its backend's name and settings, checked by agl.contracts and the backend": (
        "models.*.backend", "models.*.model", "models.*.settings.*", "models.*.long_audio.*"),
    "the error-mode judge: a model entry (null: none), checked by agl.judges.modes": ("report.judge",),
}


def _exempt(key: str) -> str | None:
    for reason, patterns in EXEMPT.items():
        for pattern in patterns:
            if key.count(".") == pattern.count(".") and fnmatch.fnmatchcase(key, pattern):
                return reason
    return None


def test_every_key_of_params_yaml_has_a_rule_in_the_table_or_a_reason_not_to():
    """The walk: a key of params.yaml (a number, a switch) that no rule holds was checked by
    hand in its config, or not at all (`download.jobs: true` ran one download)."""
    missing = [k for k, _ in _leaves("", PARAMS) if param_rule(k) is None and _exempt(k) is None]
    assert not missing, f"{len(missing)} keys of params.yaml with no rule in PARAMS: {missing}"
    # an exemption that has a rule is no exemption: one of the two is stale
    both = [k for k, _ in _leaves("", PARAMS) if param_rule(k) and _exempt(k) and ".settings.seed" not in k]
    assert not both, both


def test_a_knob_without_a_rule_in_the_table_is_refused_where_it_is_declared():
    from agl.scoring.config import knob

    with pytest.raises(ValueError, match=r"evaluate.nope: no rule in agl.core.checks.PARAMS"):
        knob("evaluate.nope", 1)


def test_metric_bootstrap_is_one_rule_and_no_intervals_is_a_callers_option():
    """`evaluate.metric_bootstrap: 0` is refused by the stage and by the config in one line;
    the importer and tests that want point values alone say `intervals=False`."""
    from agl.scoring.config import EvaluateConfig

    line = ("params.yaml evaluate.metric_bootstrap: 0 is not a whole number of at least 1; "
            "e.g. `evaluate.metric_bootstrap: 10000`")
    for check in (lambda: check_params("evaluate", {"metric_bootstrap": 0}),
                  lambda: EvaluateConfig.from_params({"metric_bootstrap": 0}),
                  lambda: EvaluateConfig(metric_bootstrap=0)):
        with pytest.raises(AglError) as exc:
            check()
        assert str(exc.value) == line
    assert EvaluateConfig(intervals=False).resamples == 0 and EvaluateConfig().resamples == 10_000
    with pytest.raises(AglError, match=r"unknown key\(s\) intervals"):
        EvaluateConfig.from_params({"intervals": False})
