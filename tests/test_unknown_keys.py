"""Every params section and settings mapping refuses a typo with the same one line:
"{source}: unknown key(s) a, b; known: x, y, z" (agl.errors.reject_unknown_keys)."""

from __future__ import annotations

import re

import pytest

from agl.errors import AglError, reject_unknown_keys


def test_the_message_names_every_unknown_key_and_the_known_ones_sorted():
    with pytest.raises(AglError) as info:
        reject_unknown_keys({"b": 1, "zz": 2, "a": 3, "x": 4}, {"x", "c", "a"}, "params.yaml demo")
    assert str(info.value) == "params.yaml demo: unknown key(s) b, zz; known: a, c, x"
    reject_unknown_keys({"a": 1}, {"a", "b"}, "params.yaml demo")  # known keys pass


def _filter(bad):
    from agl.curation.filtering import FilterConfig

    FilterConfig.from_params(bad)


def _perturb(bad):
    from agl.counterfactual.perturb import parse_perturb

    parse_perturb({"x": {"kind": "noise", **bad}})


def _models(bad):
    from agl.contracts.models import parse_models

    parse_models({"m": {"backend": "random", **bad}})


def _infer(bad):
    from agl.inference.runspec import parse_infer

    parse_infer(bad)


def _download(bad):
    from agl.dataset.prepare import from_params

    from_params({"download": bad})


def _roster(bad, tmp_path):
    from agl.inference.roster import load_roster

    path = tmp_path / "roster.yaml"
    path.write_text(f"models:\n  m:\n    backend: random\n    needs: {{{next(iter(bad))}: 1}}\n")
    load_roster(path)


def _birdrange(bad):
    from agl.backends import get_backend

    get_backend("birdrange")("x", **bad)


@pytest.mark.parametrize(
    "call, source, known",
    [
        (_filter, "params.yaml filter", "aci_cluster_s"),
        (_perturb, "params.yaml: perturb.x", "colour, kind, seed, snr_db"),
        (_models, "params.yaml: models.m", "backend"),
        (_infer, "params.yaml: infer", "concurrency"),
        (_download, "params.yaml: download", "jobs"),
        (_roster, "models.m.needs", "gpu_gb, key, server"),
        (_birdrange, "birdrange settings", "resolution_deg"),
    ],
)
def test_each_section_says_it_the_same_way(call, source, known, tmp_path):
    with pytest.raises(AglError) as info:
        call({"zz_typo": 1}, tmp_path) if call is _roster else call({"zz_typo": 1})
    message = str(info.value)
    assert re.fullmatch(rf".*{re.escape(source)}: unknown key\(s\) zz_typo; known: .*", message), message
    listed = message.split("; known: ")[1].split(", ")
    assert listed == sorted(listed) and known in message and "\n" not in message
