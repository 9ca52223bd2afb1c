"""The transformers backend end to end: tiny random models of real families, real MP3s."""

from __future__ import annotations

import pandas as pd
import pytest
from tiny_models import FAMILIES

from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest, write_manifest
from agl.inference.finalize import read_run
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.predictions.records import Status, read_predictions
from agl.prompts import load_prompt


def mp3_manifest(tmp_path, real_mp3s):
    rows = [{"key": p.parent.name, "mp3name": p.name, "latitude": 0.0, "longitude": 0.0,
             "mp3seconds": 130.0, "city": "", "country": "", "continent": "",
             **{c: 0.0 for c in ("human_sounds", "animal", "music", "natural_sounds", "channel",
                                 "environment_and_background", "sounds_of_things",
                                 "source_ambiguous_sounds")}} for p in real_mp3s]
    write_manifest(pd.DataFrame(rows), tmp_path / "m.csv")
    return clips(load_manifest(tmp_path / "m.csv"))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tiny_model_end_to_end_on_real_mp3(tmp_path, family, real_mp3s, archive_dir,
                                           family_model):
    model_dir = family_model(family)
    cl = mp3_manifest(tmp_path, real_mp3s)
    settings = {"device": "cpu", "max_new_tokens": 12, "max_seconds": 8}
    spec = ModelSpec("run", "transformers", str(model_dir), settings=settings)
    kw = dict(out_dir=tmp_path / "run", audio_root=archive_dir,
              options=RunOptions(cache_dir=tmp_path / "cache", concurrency=2, timeout_s=300,
                                 max_retries=0, progress=False))
    summary = run_inference(spec, load_prompt(), cl, **kw)
    preds = read_run(tmp_path / "run")  # meta with the timings (load/prefill/decode)
    assert set(preds) == {c.key for c in cl}
    for p in preds.values():
        # Random weights answer gibberish: recorded as unparseable, with the raw text kept, or
        # as truncated where it ran to max_new_tokens without an end token.
        m = p.meta
        cut = m["finish_reason"] == "length"
        assert p.status is (Status.TRUNCATED if cut else Status.UNPARSEABLE)
        assert p.error and p.latitude is None and (not cut or m["output_tokens"] == 12)
        assert m["backend"] == "transformers" and m["cached"] is False
        assert m["load_s"] > 0 and m["prefill_s"] > 0 and m["decode_s"] >= 0
        assert 1 <= m["output_tokens"] <= 12 and m["input_tokens"] > 50  # audio placeholders
        assert m["device"] == "cpu" and m["dtype"] == "float32"
    assert summary["n_unparseable"] + summary.get("n_truncated", 0) == 2
    assert summary["n_failed"] == 0
    assert summary["local_prefill_s"]["mean"] > 0

    # Greedy decoding is deterministic: a fresh run is served from the cache, same text.
    (tmp_path / "run" / "predictions.jsonl").unlink()
    again = run_inference(spec, load_prompt(), cl, **kw)
    preds2 = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert again["cached"] == 2 and again["session_cache_hits"] == 2
    assert {k: p.raw_reply for k, p in preds2.items()} == {k: p.raw_reply for k, p in preds.items()}


def test_missing_local_model_is_one_line_error(tmp_path, capsys, real_mp3s, archive_dir):
    from agl.cli import main

    cl = mp3_manifest(tmp_path, real_mp3s)
    assert cl
    rc = main(["infer", "--backend", "transformers", "--model", str(tmp_path / "nope"),
               "--manifest", str(tmp_path / "m.csv"), "--audio-root", str(archive_dir),
               "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "cannot load" in err
