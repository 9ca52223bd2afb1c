"""Property-based fuzzing of every reader of outside input (issue 14).

On arbitrary bytes and on mutations of valid inputs, each reader returns a result or raises
the project's own error (AglError, or the game's RequestError with a 4xx) with one line:
never another exception, never a non-finite number in what it returns or writes.

Targets: the reply parser (as the runner records its result), the manifest loader, the
predictions reader (both paths: records and the scoring frame), the authors' published-file
reader, and the game's POST body handler.

Bounded for the suite (profile `agl-ci`: a few dozen examples per target, derandomized so a
run is repeatable). A developer can fuzz much longer by hand:

    AGL_FUZZ_PROFILE=agl-long python -m pytest tests/test_fuzz.py -q   # 2,000 per target
    AGL_FUZZ_PROFILE=agl-long AGL_FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz.py -k game
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from agl.dataset.manifest import Clip, parse_manifest, write_manifest
from agl.errors import AglError
from agl.predictions.parse import parse_reply
from agl.predictions.records import Prediction, Status, _line, prediction_frame, read_predictions

settings.register_profile(
    "agl-ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "agl-long",
    max_examples=int(os.environ.get("AGL_FUZZ_EXAMPLES", "2000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FUZZ = settings.get_profile(os.environ.get("AGL_FUZZ_PROFILE", "agl-ci"))

GOOD_REPLY = (
    'Here is my answer.\n```json\n{"reasoning": "gulls, Portuguese speech", '
    '"city": "Lisbon", "country": "Portugal", "continent": "Europe", '
    '"latitude": 38.72, "longitude": -9.14, "confidence": 0.4}\n```'
)
NASTY = st.sampled_from(
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999",
        "-1e400",
        "9" * 400,
        "null",
        "true",
        '"91"',
        "[]",
        "{}",
        '"\\u0000"',
        '"\\ud800"',
        "1e-400",
        "0x10",
        "540",
        "-0.0",
        '"Unknown"',
    ]
)


def _one_line(exc: BaseException) -> None:
    assert str(exc).strip() and "\n" not in str(exc).strip(), repr(exc)


def _finite_everywhere(obj) -> None:
    if isinstance(obj, float):
        assert math.isfinite(obj), obj
    elif isinstance(obj, dict):
        for v in obj.values():
            _finite_everywhere(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _finite_everywhere(v)


def _no_constants(c: str):
    raise AssertionError(f"invalid JSON constant {c} written")


def mutate(data: st.DataObject, text: str) -> str:
    """A valid text with a few random edits: cuts, insertions, swaps of a token for a
    nasty one."""
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        kind = data.draw(st.sampled_from(["cut", "insert", "replace_number", "dup"]))
        i = data.draw(st.integers(0, len(text)))
        if kind == "cut":
            text = text[:i] + text[data.draw(st.integers(i, len(text))) :]
        elif kind == "insert":
            text = text[:i] + data.draw(st.text(max_size=8)) + text[i:]
        elif kind == "dup":
            text = text[:i] + text[i:][:40] + text[i:]
        else:
            import re

            numbers = list(re.finditer(r"-?\d+(\.\d+)?", text))
            if numbers:
                m = data.draw(st.sampled_from(numbers))
                text = text[: m.start()] + data.draw(NASTY) + text[m.end() :]
    return text


# --- the reply parser ----------------------------------------------------------------------


def _check_reply(text: str) -> None:
    try:
        pred = parse_reply("clip_1", text)
    except AglError as exc:
        _one_line(exc)
        return
    assert isinstance(pred, Prediction)
    # What the runner writes for it: valid JSON, every number finite, missing as null.
    written = json.loads(_line(pred), parse_constant=_no_constants)
    _finite_everywhere(written)
    for f in ("latitude", "longitude"):
        v = written[f]
        assert v is None or (-90 <= v <= 90 if f == "latitude" else -180 <= v <= 180), written


@FUZZ
@given(st.text(max_size=400))
def test_reply_parser_on_any_text(text):
    _check_reply(text)


@FUZZ
@given(st.data())
def test_reply_parser_on_mutated_replies(data):
    _check_reply(mutate(data, GOOD_REPLY))


# --- the manifest loader -------------------------------------------------------------------


def _manifest_text(tmp: Path) -> str:
    import pandas as pd

    from agl.dataset.manifest import CATEGORY_COLUMNS

    rows = [
        {
            "key": f"aporee_{i}_{i}",
            "short_key": "",
            "longitude": 10.5 + i,
            "latitude": 50.25,
            "altitude": "",
            "description": 'a, "quoted" text',
            "title": "t",
            "mp3name": f"c{i}.mp3",
            "mp3seconds": 120.5,
            "city": "Berlin",
            "country": "Germany",
            "continent": "Europe",
            **{c: 0.5 for c in CATEGORY_COLUMNS},
        }
        for i in range(3)
    ]
    write_manifest(pd.DataFrame(rows), tmp / "m.csv")
    return (tmp / "m.csv").read_text(encoding="utf-8")


def _check_manifest(text: str, path: Path | None = None) -> None:
    from agl.dataset.manifest import load_manifest

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            frame = load_manifest(path) if path is not None else parse_manifest(text, "m.csv")
        except AglError as exc:
            _one_line(exc)
            return
    for col in ("latitude", "longitude", "mp3seconds"):
        assert frame[col].map(math.isfinite).all(), frame[col]
    assert frame["latitude"].abs().le(90).all() and frame["longitude"].abs().le(180).all()
    for name in frame["mp3name"]:
        assert name and "/" not in name and "\x00" not in name


@pytest.fixture(scope="module")
def manifest_text(tmp_path_factory) -> str:
    return _manifest_text(tmp_path_factory.mktemp("fuzz_manifest"))


@FUZZ
@given(st.data())
def test_manifest_loader_on_mutated_manifests(manifest_text, data):
    _check_manifest(mutate(data, manifest_text))


def test_manifest_loader_refuses_an_infinite_duration(manifest_text, tmp_path):
    """Found by the long profile (issue 24): mp3seconds `Infinity` passed the [0, inf] range."""
    bad = manifest_text.replace("120.5", "Infinity", 1)
    (tmp_path / "m.csv").write_text(bad)
    for read in (lambda: parse_manifest(bad, "m.csv"), lambda: _load(tmp_path / "m.csv")):
        with pytest.raises(AglError, match="row 1 .*'mp3seconds': '(inf|Infinity)' is not a finite number"):
            read()


def _load(path):
    from agl.dataset.manifest import load_manifest

    return load_manifest(path)


@FUZZ
@given(st.binary(max_size=600))
@example(blob=b"key,mp3name\n\xff\xfe,x\n")  # not UTF-8
@example(blob=b'key,description\n"' + b"x" * 140_000 + b'",1\n')  # issue 24: a runaway field
def test_manifest_loader_on_any_bytes(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("m") / "m.csv"
    path.write_bytes(blob)
    _check_manifest("", path)


@FUZZ
@given(st.data())
def test_manifest_file_with_mutated_bytes(manifest_text, tmp_path_factory, data):
    raw = bytearray(manifest_text.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("m") / "m.csv"
    path.write_bytes(bytes(raw))
    _check_manifest("", path)


# --- the predictions reader ----------------------------------------------------------------

GOOD_PREDICTIONS = "".join(
    _line(
        Prediction(
            f"k{i}",
            Status(status),
            latitude=lat,
            longitude=lon,
            city="Paris",
            country="France",
            continent="Europe",
            confidence=0.5,
        )
    )
    for i, (status, lat, lon) in enumerate([("ok", 48.85, 2.35), ("ok", -33.9, 151.2), ("partial", None, None)])
)


def _check_predictions(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            records = read_predictions(path)
        except AglError as exc:
            _one_line(exc)
        else:
            for p in records.values():
                _finite_everywhere([p.latitude, p.longitude, p.confidence])
                json.loads(_line(p), parse_constant=_no_constants)
        try:
            frame = prediction_frame(path)
        except AglError as exc:
            _one_line(exc)
        else:
            for col in ("latitude", "longitude", "confidence"):
                assert not frame[col].map(math.isinf).any(), frame[col]


@FUZZ
@given(st.data())
def test_predictions_reader_on_mutated_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("p") / "predictions.jsonl"
    path.write_text(mutate(data, GOOD_PREDICTIONS), encoding="utf-8")
    _check_predictions(path)


@FUZZ
@given(st.binary(max_size=400))
@example(blob=b"0")  # found by the long profile: a JSON scalar where a record belongs
@example(blob=b'{"sample_id": ["k"], "status": "ok"}\n')
@example(blob=b'{"sample_id": "k", "status": "ok", "latitude": Infinity}\n')
@example(blob=b"null\n")  # issue 24: pyarrow's JSON reader crashed the process (SIGSEGV)
@example(blob=b'{"sample_id": "k", "status": "ok", "city": "Par\xe9s"}\n')  # a Latin-1 byte
@example(blob=b'{"sample_id": "k", "status": "ok"} {"sample_id": "j", "status": "ok"}\n')
def test_predictions_reader_on_any_bytes(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("p") / "predictions.jsonl"
    path.write_bytes(blob)
    _check_predictions(path)


# --- the authors' published files ----------------------------------------------------------

GOOD_PUBLISHED = json.dumps(
    [
        {
            "question_id": "aporee_1_1",
            "predicted_latitude": 48.8,
            "predicted_longitude": "2.3",
            "predicted_city": "Paris",
            "predicted_country": "France",
            "predicted_continent": "Europe",
            "model_output": '{"latitude": 48.8, "longitude": 2.3}',
        },
        {
            "question_id": "aporee_2_2",
            "predicted_latitude": "Unknown",
            "predicted_longitude": "Unknown",
            "predicted_city": "Unknown",
            "predicted_country": "Unknown",
            "predicted_continent": "Unknown",
            "model_output": "",
        },
    ],
    indent=1,
)


def _check_published(path: Path) -> None:
    from agl.scoring.evaluate import load_predictions_any

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            frame = load_predictions_any(path)
        except AglError as exc:
            _one_line(exc)
            return
    for col in ("latitude", "longitude", "confidence"):
        assert not frame[col].map(math.isinf).any(), frame[col]


@FUZZ
@given(st.data())
def test_published_reader_on_mutated_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("pub") / "result.json"
    path.write_text(mutate(data, GOOD_PUBLISHED), encoding="utf-8")
    _check_published(path)


@FUZZ
@given(st.binary(max_size=400))
def test_published_reader_on_any_bytes(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("pub") / "result.json"
    path.write_bytes(b"[" + blob)  # read as a published file, whatever follows
    _check_published(path)


# --- the game's POST handler ---------------------------------------------------------------

CLIPS = {"aporee_1_1": Clip("aporee_1_1", "a.mp3", 52.5, 13.4, 100.0, "Berlin", "Germany", "Europe")}
GOOD_GUESS = json.dumps(
    {
        "clip_id": "aporee_1_1",
        "latitude": 52.1,
        "longitude": 13.2,
        "city": "Berlin",
        "country": "Germany",
        "continent": "Europe",
        "listened_s": 12.5,
    }
)


def _check_guess(body: bytes) -> None:
    from agl.game.server import parse_body
    from agl.game.session import RequestError, parse_guess

    try:
        guess = parse_guess(parse_body(body), CLIPS)
    except RequestError as exc:
        assert 400 <= exc.status < 500, exc.status
        assert exc.message.strip() and "\n" not in exc.message.strip()
        return
    assert guess.clip_id in CLIPS
    assert math.isfinite(guess.latitude) and abs(guess.latitude) <= 90
    assert math.isfinite(guess.longitude) and abs(guess.longitude) <= 180
    assert guess.listened_s is None or math.isfinite(guess.listened_s)


@FUZZ
@given(st.binary(max_size=300))
def test_game_post_handler_on_any_bytes(body):
    _check_guess(body)


@FUZZ
@given(st.data())
def test_game_post_handler_on_mutated_guesses(data):
    body = mutate(data, GOOD_GUESS)
    assume(body)
    _check_guess(body.encode("utf-8", "surrogatepass"))


def test_game_post_handler_on_deep_nesting():
    _check_guess(b"[" * 5000 + b"]" * 5000)
    _check_guess(b'{"clip_id": "aporee_1_1", "latitude": ' + b"9" * 5000 + b', "longitude": 1}')


# --------------------------------------------------------------------------- params files
_SECTIONS = ("infer", "models", "paper", "evaluate", "executor", "download", "counterfactual")
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                     st.sampled_from(["NaN", ".inf", "1e12", "yes please", "http://u:p@h/x"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["limit", "seed", "backend", "model", "settings",
                                     "base_url", "published", "kind", "ray", "shards",
                                     "metric_bootstrap", "concurrency", "path", "sha256"]),
                    inner, max_size=4)), max_leaves=12)
_DOCS = st.dictionaries(st.sampled_from(_SECTIONS), _VALUES, max_size=4)


def _params_readers(path: Path) -> None:
    """What a stage and `agl infer` do with a params file: read it, then hand each section
    to the config that reads it."""
    from agl.core.checks import check_params
    from agl.dataset.sources import SourceConfig
    from agl.executor.config import ExecutorConfig
    from agl.inference.runspec import load_params, parse_infer, parse_models

    doc = load_params(path)
    for name, section in doc.items():
        if section is not None:
            check_params(name, section, str(path))
    parse_infer(doc.get("infer"), str(path))
    if doc.get("models") is not None:
        parse_models(doc.get("models"), str(path))
    SourceConfig.from_params(doc)
    ExecutorConfig.from_params(doc.get("executor"), str(path))


@FUZZ
@given(st.data())
def test_params_file_readers_on_generated_and_mutated_files(tmp_path_factory, data):
    """YAML structure, types, sizes and encodings: a result or one line, never a traceback."""
    import yaml

    text = yaml.safe_dump(data.draw(_DOCS), sort_keys=False, allow_unicode=True)
    raw = bytearray(text.encode(data.draw(st.sampled_from(["utf-8", "utf-16", "latin-1"])),
                                errors="replace"))
    for _ in range(data.draw(st.integers(0, 3))):  # duplicated lines, stray bytes, cuts
        op = data.draw(st.sampled_from(["dup", "byte", "cut"]))
        lines = bytes(raw).splitlines(keepends=True) or [b""]
        at = data.draw(st.integers(0, len(lines) - 1))
        if op == "dup":
            lines.insert(at, lines[at])
        elif op == "byte":
            lines[at] = lines[at] + bytes([data.draw(st.integers(0, 255))])
        else:
            lines = lines[:at]
        raw = bytearray(b"".join(lines))
    path = tmp_path_factory.mktemp("params") / "params.yaml"
    path.write_bytes(bytes(raw))
    try:
        _params_readers(path)
    except AglError as exc:
        assert "\n" not in str(exc), str(exc)


# --- an Every Eval Ever record (agl import) -------------------------------------------------

_LEAF = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30), st.booleans(),
    st.none(), st.text(max_size=12), st.sampled_from([-500.0, 1e308, 7.5, 99999, -1, 2.0, 0.5, 20003.94]),
)
_VALUE = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=6), inner, max_size=3), max_leaves=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@pytest.fixture(scope="module")
def eee_record(tmp_path_factory):
    """A valid AGL1K record without instance rows (the stated-numbers path, the cheap one) and
    the manifest it was written against."""
    import pandas as pd
    from factories import manifest, prediction

    from agl.interchange.eee_export import ExportConfig, export_runs
    from agl.predictions.records import write_predictions
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    root = tmp_path_factory.mktemp("eee-fuzz")
    frame = manifest([{"key": f"s{i}", "title": f"SYNTHETIC clip {i}", "latitude": 10.0 * i,
                       "longitude": 5.0 * i, "city": "Lyon"} for i in range(6)])
    assert isinstance(frame, pd.DataFrame)
    frame.to_csv(root / "manifest.csv", index=False)
    run = root / "runs" / "knn"
    write_predictions(run / "predictions.jsonl",
                      [prediction(f"s{i}", 10.0 * i + 1, 5.0 * i, "Lyon", "France", "Europe") for i in range(6)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluate_run("knn", run / "predictions.jsonl", root / "manifest.csv", run,
                     EvaluateConfig(metric_bootstrap=20, track=False), info={"model": "m", "backend": "knn"})
        (written,), _ = export_runs([root / "runs"], root / "manifest.csv", root / "out", ExportConfig(resamples=20))
    doc = json.loads(written.read_text())
    del doc["detailed_evaluation_results"]
    return doc, root / "manifest.csv"


# ~0.2 s an example (an import, a leaderboard): a third of the profile's count in the suite;
# AGL_FUZZ_PROFILE=agl-long runs the full 2,000 (docs/testing.md).
@settings(FUZZ, max_examples=FUZZ.max_examples if FUZZ.max_examples > 100 else 15)
@given(st.data())
def test_eee_import_on_mutated_records(tmp_path_factory, eee_record, data):
    """Values, types, sizes, encodings and nesting of an EEE record: `agl import` takes it or
    refuses it in one line, and nothing it puts on the leaderboard is a number no run can
    have (issue 49)."""
    import copy

    from agl.interchange.eee_import import ImportConfig, import_records
    from agl.interchange.eee_metrics import METRICS
    from agl.scoring import leaderboard

    base, manifest = eee_record
    doc = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        paths = [p for p in _paths(doc) if p]
        at = data.draw(st.sampled_from(paths), label="at")
        parent = doc
        for k in at[:-1]:
            parent = parent[k]
        if data.draw(st.booleans(), label="delete") and isinstance(parent, dict):
            del parent[at[-1]]
        else:
            parent[at[-1]] = data.draw(_VALUE, label="value")
    if data.draw(st.booleans(), label="deep"):
        depth = data.draw(st.sampled_from([40, 2_000, 100_000]), label="depth")
        doc["model_info"]["additional_details"]["x"] = "__DEEP__"
        text = json.dumps(doc).replace('"__DEEP__"', "[" * depth + "]" * depth)
    else:
        text = json.dumps(doc)  # NaN and Infinity written as Python writes them
    raw = text.encode(data.draw(st.sampled_from(["utf-8", "utf-16", "latin-1"]), label="encoding"),
                      errors="replace")
    if data.draw(st.booleans(), label="cut"):
        raw = raw[:data.draw(st.integers(0, len(raw)), label="cut at")]
    folder = tmp_path_factory.mktemp("rec")
    (folder / "r.json").write_bytes(raw)
    out = folder / "imported"
    try:
        import_records(folder / "r.json", manifest, out, ImportConfig(resamples=20))
    except AglError as exc:
        _one_line(exc)
        return
    files = sorted(out.glob("*/metrics.json"))
    assert files
    for f in files:
        json.loads(f.read_text(), parse_constant=_no_constants)
    board = leaderboard.collect(files, "paper")
    for metric, (_, (_, _, _, lo, hi), _, _) in METRICS.items():
        for col in (metric, f"{metric}_lo", f"{metric}_hi"):
            if col in board:
                values = [v for v in board[col] if v is not None and not (isinstance(v, float) and math.isnan(v))]
                assert all(lo <= float(v) <= hi for v in values), (col, values)
