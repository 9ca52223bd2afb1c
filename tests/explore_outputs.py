"""Small pipeline outputs for the explorer's tests, written directly (no DVC run).

Four clips (Paris, Tokyo, Nairobi, Lima) with real MP3s, except Nairobi's (missing on
purpose); three runs: `alpha` (scored; its reasoning on Paris is hostile markup), `beta`
(scored; refuses Tokyo, fails Nairobi) and `gamma` (predictions but no score table); one
intervention `mask_speech/default` on Paris and Tokyo that only `alpha` listened to (Tokyo's
derived audio missing), and `truncate/seconds_3` on Paris that no run listened to; a BirdNET
table for Paris and Tokyo; no speech table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from factories import manifest, prediction

from agl.core import canonical
from agl.counterfactual.encode import encode_mp3
from agl.dataset.manifest import write_manifest
from agl.predictions.records import Status, failed, write_predictions
from agl.scoring.evaluate import score_run

HOSTILE = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> '
           'sounds like Paris & "friends"')
CLIPS = [
    dict(key="k0", title="Paris <b>market</b>", latitude=48.8566, longitude=2.3522),
    dict(key="k1", title="Tokyo station", city="Tokyo", country="Japan", continent="Asia",
         latitude=35.6762, longitude=139.6503, human_sounds=1.0),
    dict(key="k2", title="Nairobi park", city="Nairobi", country="Kenya", continent="Africa",
         latitude=-1.2921, longitude=36.8219, animal=1.0),
    dict(key="k3", title="Lima coast", city="Lima", country="Peru", continent="South America",
         latitude=-12.0464, longitude=-77.0428),
]


def _mp3(path: Path, seconds: float, freq: float) -> None:
    sr = 16000
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * np.random.default_rng(0).standard_normal(len(t))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_mp3(x.astype(np.float32)[:, None], sr))


def _run(folder: Path, frame: pd.DataFrame, preds: list, *, scores: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_predictions(folder / "predictions.jsonl", preds)
    if scores:
        canonical.write_csv(score_run(frame, preds, "paper"), folder / "scores_paper.csv")


def write_outputs(root: Path) -> Path:
    """The outputs under `root` in the pipeline's layout; returns root."""
    frame = manifest([{**c, "mp3name": f"{c['key']}.mp3", "mp3seconds": 4.0} for c in CLIPS])
    write_manifest(frame, root / "data" / "manifest.csv")
    for i, c in enumerate(CLIPS):
        if c["key"] != "k2":  # Nairobi's audio is missing
            _mp3(root / "data" / "audio" / c["key"] / f"{c['key']}.mp3", 4.0, 300 + 200 * i)

    runs = root / "build" / "runs"
    _run(runs / "alpha", frame, [
        prediction("k0", 48.0, 2.0, "Orleans", "France", "Europe", reasoning=HOSTILE),
        prediction("k1", 34.69, 135.50, "Osaka", "Japan", "Asia", reasoning="trains, Japanese"),
        prediction("k2", 40.4168, -3.7038, "Madrid", "Spain", "Europe", reasoning="church bells"),
        prediction("k3", 51.5, -0.12, "London", "United Kingdom", "Europe", reasoning="waves"),
    ])
    _run(runs / "beta", frame, [
        prediction("k0", 52.52, 13.405, "Berlin", "Germany", "Europe", reasoning="German"),
        prediction("k1", status=Status.REFUSED, refused=True, reasoning="cannot tell"),
        failed("k2", "timeout after 120 s"),
        prediction("k3", -33.45, -70.67, "Santiago", "Chile", "South America"),
    ])
    _run(runs / "gamma", frame, [prediction("k0", 45.76, 4.84, "Lyon", "France", "Europe")],
         scores=False)

    perturb = root / "build" / "perturb"
    derived = perturb / "mask_speech" / "default"
    write_manifest(frame[frame["key"].isin(["k0", "k1"])], derived / "manifest.csv")
    _mp3(derived / "audio" / "k0" / "k0.mp3", 4.0, 900)  # k1's derived audio is missing
    canonical.write_csv(pd.DataFrame([{"key": "k0", "speech_s": 0.0, "replaced_s": 0.0},
                                      {"key": "k1", "speech_s": 3.2, "replaced_s": 3.5}]),
                        derived / "perturb.csv")
    (perturb / "mask_speech.json").write_text(json.dumps({"kind": "mask_speech"}))
    short = perturb / "truncate" / "seconds_3"
    write_manifest(frame[frame["key"] == "k0"], short / "manifest.csv")
    _mp3(short / "audio" / "k0" / "k0.mp3", 3.0, 500)
    heard = frame[frame["key"].isin(["k0", "k1"])]
    _run(root / "build" / "listen" / "alpha" / "mask_speech" / "default", heard, [
        prediction("k0", 40.4168, -3.7038, "Madrid", "Spain", "Europe", reasoning="no voices"),
        prediction("k1", 35.6762, 139.6503, "Tokyo", "Japan", "Asia", reasoning="trains"),
    ])

    curation = root / "build" / "curation"
    curation.mkdir(parents=True)
    pd.DataFrame([
        {"key": "k0", "status": "ok", "birds_heard": True, "n_species": 1, "n_other": 0,
         "species": "Turdus merula", "other_classes": "", "error": ""},
        {"key": "k1", "status": "ok", "birds_heard": False, "n_species": 0, "n_other": 1,
         "species": "", "other_classes": "Engine", "error": ""},
    ]).to_csv(curation / "birds.csv", index=False)
    (curation / "birds_detections.jsonl").write_text(json.dumps(
        {"key": "k0", "status": "ok", "detections": [
            {"scientific": "Turdus merula", "common": "Eurasian Blackbird", "kind": "species",
             "max_confidence": 0.91, "seconds": 3.0, "windows": 1}]}) + "\n")
    return root
