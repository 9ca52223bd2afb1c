"""One default per knob, whatever the entrance: `agl infer --backend NAME` with nothing but the
manifest, the audio and the output runs what the stage infer@NAME runs from params.yaml.

Every registered backend is named here, once: an offline one answers on demo clips from the
command line and, where params.yaml has its entry, gives the records the stage's way gives; an
API one without its key says which variable to set, in one line; one that cannot assume a model
(or a source) asks for it, in one line. A new backend fails the first test until it is sorted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from agl.backends import available_backends, get_backend

# One worker builds the demo clips once and every test here reads them (and the caches).
pytestmark = pytest.mark.xdist_group("backend_defaults")
REPO = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
OFFLINE = ("random", "random-sphere", "prior", "knn", "langprior", "birdrange")
API = {"gemini": "no API key; set the environment variable GEMINI_API_KEY",
       "openai": "no API key; set the environment variable OPENAI_API_KEY",
       "openai-compatible": "set base_url"}  # a local server's key is optional: its URL is not
NAMED = {"transformers": "name the model with --model", "replay": "set `source`",
         "blind": "set `of`", "cascade": "text_backend"}  # wrappers: what they wrap
# Four demo clips: birdsong, speech (Whisper runs), surf, birdsong with crickets.
KEYS = ("demo_0001", "demo_0002", "demo_0003", "demo_0015")


def test_every_registered_backend_is_sorted_here():
    from agl.backends import get_backend

    # agl's own backends (a test may register one of its own, e.g. test_localizability's)
    ours = {n for n in available_backends() if get_backend(n).__module__.startswith("agl.")}
    assert ours == set(OFFLINE) | set(API) | set(NAMED)


@pytest.fixture(scope="module")
def demo(tmp_path_factory, fresh_demo):
    """(manifest of KEYS, audio root, a work folder: the caches the defaults name land there)."""
    from agl.dataset.manifest import load_manifest, write_manifest

    root = tmp_path_factory.mktemp("defaults")
    fresh_demo(root / "demo")
    frame = load_manifest(root / "demo" / "manifest.csv")
    write_manifest(frame[frame["key"].isin(KEYS)], root / "manifest.csv")
    (root / "work").mkdir()
    return root / "manifest.csv", root / "demo" / "audio", root / "work"


def _records(run: Path) -> list[dict]:
    out = []
    for line in (run / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        rec["meta"].pop("run_fingerprint")  # hashes the settings as written ({} vs {seed: 0})
        out.append(rec)
    return out


@pytest.mark.parametrize("name", OFFLINE)
def test_an_offline_backend_answers_with_no_flag_as_its_stage_does(name, demo, monkeypatch, capsys):
    from agl.cli import main
    from agl.inference.params_run import RunTarget, run_spec
    from agl.inference.runspec import model_entry, parse_infer

    manifest, audio, work = demo
    monkeypatch.chdir(work)  # cache/whisper, cache/speech, cache/responses... as a fresh clone's
    cli = work / "cli" / name
    # The entry's long-audio protocol is not a backend setting but how clips are heard (knn: in
    # 30-s windows): the command gets it as its flags.
    hearing = (PARAMS["models"].get(name) or {}).get("long_audio") or {}
    flags = [f for k, v in hearing.items()
             for f in ("--long-audio" if k == "mode" else f"--{k.replace('_', '-')}", str(v))]
    rc = main(["infer", "--backend", name, "--manifest", str(manifest), "--audio-root", str(audio),
               "--out", str(cli), "--no-progress", *flags])
    assert rc == 0, capsys.readouterr().err
    records = _records(cli)
    assert sorted(r["sample_id"] for r in records) == sorted(KEYS)
    assert all(r["status"] in ("ok", "partial", "refused") and not r["error"] for r in records), records
    assert {r["meta"]["model"] for r in records} == {get_backend(name).default_model} != {""}
    entry = PARAMS["models"].get(name)
    if entry is None:  # birdrange: no entry (its grid takes a while); see the next test
        return
    stage = work / "stage" / name
    run_spec(model_entry(name, entry, "params.yaml", REPO / "params.yaml"), parse_infer(PARAMS["infer"]),
             RunTarget(manifest, audio, stage), progress=False)
    assert _records(stage) == records


def _state(backend) -> dict:
    """What a backend built from its model and settings (locks, caches and clients aside)."""
    return {k: v for k, v in vars(backend).items() if not k.startswith("_") and k != "settings"}


def _commented_entry(name: str) -> dict:
    """A params.yaml `models:` entry given as a comment (`#   name: {...}`, maybe two lines)."""
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    found = re.search(rf"^\s*#\s+{name}: (\{{.*?\}}\}})$", text, re.M | re.S)
    assert found, f"params.yaml has no commented entry for {name}"
    return yaml.safe_load(re.sub(r"\n\s*#\s*", " ", found.group(1)))


@pytest.mark.parametrize("name", OFFLINE)
def test_the_params_entry_is_the_backends_default(name):
    """The entry (or the commented one) builds the backend a run with no model and no setting
    builds: the backend's defaults are the entry's, so both entrances run one thing."""
    entry = PARAMS["models"].get(name) or _commented_entry(name)
    cls = get_backend(entry["backend"])
    assert entry["model"] == cls.default_model
    assert _state(cls(entry["model"], **(entry.get("settings") or {}))) == _state(cls())


@pytest.mark.parametrize("name", [*API, *NAMED])
def test_a_backend_that_needs_more_says_what_in_one_line(name, demo, monkeypatch, capsys):
    from agl.cli import main

    manifest, audio, work = demo
    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(work)
    rc = main(["infer", "--backend", name, "--manifest", str(manifest), "--audio-root", str(audio),
               "--out", str(work / "needs" / name), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err
    assert err.startswith(f"agl infer: error: {name} backend: ") and {**API, **NAMED}[name] in err
    assert not (work / "needs" / name / "predictions.jsonl").exists()
