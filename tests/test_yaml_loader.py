"""One reader for every YAML file agl is configured by (agl.core.yamlfile): a duplicate key,
a file too large, too deep or full of aliases, bytes that are not UTF-8 and a top level that
is not a mapping are each one line naming the file and the line, from the library, a stage
and the command line alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env

from agl.core.yamlfile import MAX_BYTES, load_yaml, parse_yaml
from agl.errors import AglError
from agl.inference.runspec import load_params

REPO = Path(__file__).resolve().parents[1]
LAUGHS = b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + b"".join(
    b"%c: &%c [%s]\n" % (98 + i, 98 + i, b", ".join([b"*%c" % (97 + i)] * 9)) for i in range(9))

BAD = {
    "duplicate key": (b"infer:\n  limit: 3\nevaluate: {}\ninfer:\n  limit: 5\n",
                      "line 4: key 'infer' given twice (first at line 1)"),
    "duplicate nested key": (b"evaluate:\n  seed: 0\n  seed: 1\n", "line 3: key 'seed' given twice"),
    "not UTF-8": (b"mlflow:\n  experiment: caf\xe9\n", "line 2: byte 0xe9 at offset 25 is not UTF-8"),
    "a list": (b"- infer\n- evaluate\n", "the top level is a list, not a mapping"),
    "a string": (b"just words\n", "the top level is a str, not a mapping"),
    "too deep": (b"a: " + b"[" * 40 + b"]" * 40 + b"\n", "nested deeper than 32 levels"),
    "billion laughs": (LAUGHS, "more than 64 alias references"),
    "broken": (b"infer: [1,\n", "not valid YAML"),
    "too large": (b"#" * (MAX_BYTES + 10), "too large for a configuration file"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_each_bad_file_is_one_line_naming_it(case, tmp_path):
    data, said = BAD[case]
    path = tmp_path / "params.yaml"
    path.write_bytes(data)
    with pytest.raises(AglError) as err:
        load_params(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(path)) and said in msg, msg


def test_what_yaml_allows_still_reads():
    assert parse_yaml(b"", "p") == {}
    assert parse_yaml(b"\xef\xbb\xbfa: 1\n", "p") == {"a": 1}  # a BOM
    # A merge may override the merged keys; only keys written twice are refused.
    assert parse_yaml(b"b: &b {x: 1, y: 2}\nc: {<<: *b, x: 3}\n", "p")["c"] == {"x": 3, "y": 2}
    assert load_yaml(REPO / "params.yaml") == load_params(REPO / "params.yaml")


def test_a_stage_and_the_command_line_say_it_in_one_line(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_bytes(BAD["duplicate key"][0])
    env = subprocess_env()
    stage = subprocess.run([sys.executable, str(REPO / "stages" / "infer.py"), "--name", "knn",
                            "--manifest", "m.csv", "--audio-root", "a", "--out", "o", "--params",
                            str(bad)], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    cli = subprocess.run([sys.executable, "-m", "agl.cli", "infer", "--entry", "knn", "--params",
                          str(bad), "--manifest", "m.csv", "--out", "o", "--dry-run"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    for done in (stage, cli):
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1, done.stderr
        assert "key 'infer' given twice" in lines[0] and "Traceback" not in done.stderr
