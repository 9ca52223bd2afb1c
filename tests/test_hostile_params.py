"""Params the fifth hostile pass found accepted silently or ending in a traceback (issue 49):
`executor.ray.shards: 2.5` (cut to 2), `max_retries: true` (read as 1), `export.organization:
[a, b]` (written as "['a', 'b']" into every record), a key that YAML reads as a number, a
boolean or null inside a section (a TypeError traceback where a name was expected)."""

from __future__ import annotations

import pytest

from agl.cli import main
from agl.core.yamlfile import parse_yaml
from agl.errors import AglError
from agl.executor.config import ExecutorConfig


@pytest.mark.parametrize("ray, said", [
    ({"shards": 2.5}, "executor.ray.shards: 2.5 is not a whole number"),
    ({"max_retries": True}, "executor.ray.max_retries: True is not a whole number"),
    ({"actors": 1.5}, "executor.ray.actors: 1.5 is not null or a whole number of at least 1"),
    ({"num_cpus": "two"}, "executor.ray.num_cpus: 'two' is not a finite number"),
    ({"address": 5}, "executor.ray.address: 5 is not text or null"),
])
def test_ray_settings_of_the_wrong_type_are_refused_not_cut(ray, said):
    with pytest.raises(AglError, match=said.replace(".", r"\.")):
        ExecutorConfig.from_params({"kind": "ray", "ray": ray})
    with pytest.raises(AglError, match="executor.models.m.ray"):
        ExecutorConfig.from_params({"models": {"m": {"ray": ray}}})
    assert ExecutorConfig.from_params({"ray": {"shards": 4.0}}).ray.shards == 4  # a whole number


@pytest.mark.parametrize("value", ["[a, b]", "{name: a}", "3", "''"])
def test_export_organization_must_be_one_name(tmp_path, capsys, value):
    params = tmp_path / "params.yaml"
    params.write_text(f"export:\n  organization: {value}\n")
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("key\n")
    rc = main(["export", "eee", "--runs", str(tmp_path), "--manifest", str(manifest),
               "--out", str(tmp_path / "out"), "--params", str(params)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "export.organization" in err and "is not one organization" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, key, kind", [
    ("evaluate:\n  1: 2\n", "1", "a number"),
    ("models:\n  knn:\n    settings:\n      yes: 1\n", "yes", "true/false"),
    ("report:\n  null: 3\n", "null", "null"),
    ("report:\n  [a, b]: 3\n", "a list", "a list"),
])
def test_a_key_that_is_no_name_is_one_line_with_its_line(text, key, kind):
    with pytest.raises(AglError) as err:
        parse_yaml(text.encode(), "params.yaml")
    line = str(err.value)
    assert line.startswith(f"params.yaml: line {text.count(chr(10))}: key {key!r} is read as {kind}"), line
