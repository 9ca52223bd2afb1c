"""Outputs do not depend on threads, processes, concurrency or the order replies arrive in."""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import run, subprocess_env
from test_inference_api import make_clips

from agl.backends.baselines import UniformRandom
from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest, write_manifest
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.prompts import load_prompt

REPO = Path(__file__).resolve().parents[1]


class ShuffledArrivals(UniformRandom):
    """The `random` baseline, but each reply yields to the event loop a seeded number of
    times first, so replies arrive in an order that depends on `order_seed` and concurrency."""

    def __init__(self, *args, order_seed: int = 0, **kw):
        super().__init__(*args, **kw)
        self._order = random.Random(order_seed)
        self.arrivals: list[str] = []

    async def generate(self, request):
        for _ in range(self._order.randrange(50)):
            await asyncio.sleep(0)  # a yield, not a wait
        self.arrivals.append(request.sample_id)
        return await super().generate(request)


def _run(
    tmp_path: Path, name: str, manifest: Path, audio: Path, *, concurrency: int, order_seed: int
) -> tuple[bytes, bytes, list[str]]:
    backend = ShuffledArrivals("uniform-latlon", seed=0, order_seed=order_seed)
    out = tmp_path / name
    run_inference(
        ModelSpec(name, "random", "uniform-latlon", settings={"seed": 0}),
        load_prompt(),
        clips(load_manifest(manifest)),
        out_dir=out,
        audio_root=audio,
        options=RunOptions(concurrency=concurrency, progress=False),
        backend=backend,
    )
    return ((out / "predictions.jsonl").read_bytes(), (out / "run_summary.json").read_bytes(), backend.arrivals)


def test_concurrency_and_reply_order_do_not_change_the_tracked_bytes(tmp_path):
    manifest, audio = make_clips(tmp_path, 24)
    one = _run(tmp_path, "c1", manifest, audio, concurrency=1, order_seed=1)
    eight = _run(tmp_path, "c8", manifest, audio, concurrency=8, order_seed=2)
    shuffled = _run(tmp_path, "c8b", manifest, audio, concurrency=8, order_seed=3)
    assert one[2] != eight[2] != shuffled[2]  # the replies really arrived in other orders
    assert one[0] == eight[0] == shuffled[0]
    assert one[1] == eight[1] == shuffled[1]
    keys = [line.split('"sample_id":"')[1].split('"')[0] for line in one[0].decode().splitlines()]
    assert keys == sorted(keys)  # manifest order
    assert b"latency_s" not in one[0] + one[1] and b"wall_s" not in one[1]


def test_knn_choice_ignores_last_digit_noise_and_breaks_ties_by_manifest_order(monkeypatch):
    from agl.backends import knn
    from agl.contracts.calls import Request

    rng = np.random.default_rng(0)
    base = {f"c{i}": rng.normal(size=4 * knn.N_MELS) for i in range(12)}
    base["c11"] = base["c10"].copy()  # c10 and c11 are identical: a tie for their neighbours
    base["c0"] = base["c10"] + 0.05 * rng.normal(size=base["c10"].size)  # nearest: c10 = c11

    class Clip:
        def __init__(self, key):
            self.key, self.relpath = key, f"{key}/a.mp3"
            self.country = self.city = self.continent = key
            self.latitude, self.longitude = 0.0, 0.0

    clip_list = [Clip(k) for k in base]

    def answers(noise: float) -> list[str]:
        monkeypatch.setattr(
            knn, "clip_features", lambda p, s: base[p.parent.name] * (1 + noise * rng.normal(size=base["c0"].size))
        )
        monkeypatch.setattr(Path, "is_file", lambda self: True)
        b = knn.NearestNeighbours("logmel", k=1, leave_out="clip")  # ties, not clusters
        b.prepare(clip_list, Path("/audio"))
        sim = b._sim.copy()
        replies = [asyncio.run(b.generate(Request(sample_id=c.key, prompt=""))) for c in clip_list]
        return [r.text for r in replies], sim

    clean, sim = answers(0.0)
    noisy, sim_noisy = answers(1e-9)  # far below the features' 4 decimals
    assert clean == noisy and np.array_equal(sim, sim_noisy)
    # c0 is equally near c10 and c11 (same similarity to the last digit): the tie goes to
    # c10, the first in manifest order (stable argsort), on every machine.
    assert sim[0, 10] == sim[0, 11] and sim[0, 10] == sim[0].max()
    assert '"country": "c10"' in clean[0]
    assert '"country": "c11"' in clean[10] and '"country": "c10"' in clean[11]


@pytest.fixture(scope="module")
def small_set(tmp_path_factory) -> tuple[Path, Path]:
    """Eight 3 s MP3 clips (tones, chirps and noise; one near-silent, one clipped) in the
    data/ layout, with a manifest."""
    import soundfile as sf
    from factories import manifest as make_manifest

    root = tmp_path_factory.mktemp("small")
    rng = np.random.default_rng(7)
    t = np.arange(6 * 16_000) / 16_000  # longer than filter.min_seconds (5 s)
    rows = []
    for i in range(8):
        x = 0.2 * np.sin(2 * np.pi * (180 + 90 * i) * t * (1 + 0.1 * i * t))
        x += 0.05 * rng.normal(size=t.size) * (1 + np.sin(2 * np.pi * 0.5 * i * t))
        if i == 3:
            x *= 1e-4  # near silence
        if i == 6:
            x = np.clip(8 * x, -1, 1)  # clipping
        key = f"clip_{i}"
        (root / "audio" / key).mkdir(parents=True)
        sf.write(root / "audio" / key / "a.mp3", x.astype(np.float32), 16_000, format="MP3")
        rows.append(
            {
                "key": key,
                "mp3name": "a.mp3",
                "mp3seconds": 6.0,  # what the clip decodes to: not truncated
                "country": ["France", "Kenya", "Peru"][i % 3],
                "latitude": 10.0 * i,
                "longitude": -20.0 + 7 * i,
            }
        )
    write_manifest(make_manifest(rows), root / "manifest.csv")
    return root / "manifest.csv", root / "audio"


def _stage(script: str, args: list[str], *, threads: str | None, cwd: Path) -> None:
    """A stage script in a fresh process (thread counts are read once per process)."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in subprocess_env().items() if k not in names}
    if threads:
        env.update(dict.fromkeys(names, threads))
    run([sys.executable, str(REPO / "stages" / script), *args], cwd, env)


def test_filter_and_knn_bytes_do_not_depend_on_threads_or_processes(tmp_path, small_set):
    manifest, audio = small_set
    outputs = {}
    for label, threads, jobs in (("omp1-jobs1", "1", 1), ("default-jobs2", None, 2)):
        work = tmp_path / label
        work.mkdir()
        (work / "params.yaml").write_text(
            yaml.safe_dump(
                {
                    "filter": {"jobs": jobs},
                    "infer": {"cache_dir": None, "concurrency": 8 if jobs == 2 else 1},
                    "models": {
                        "knn": {"backend": "knn", "model": "logmel-stats", "settings": {"k": 1, "max_seconds": 30}}
                    },
                }
            )
        )
        _stage(
            "filter.py",
            [
                "--manifest",
                str(manifest),
                "--audio-root",
                str(audio),
                "--out",
                "f.csv",
                "--summary",
                "s.json",
                "--params",
                "params.yaml",
            ],
            threads=threads,
            cwd=work,
        )
        _stage(
            "infer.py",
            ["--name", "knn", "--manifest", str(manifest), "--audio-root", str(audio), "--out", "knn"],
            threads=threads,
            cwd=work,
        )
        outputs[label] = [
            (work / p).read_bytes() for p in ("f.csv", "s.json", "knn/predictions.jsonl", "knn/run_summary.json")
        ]
    a, b = outputs.values()
    assert a == b
    assert a[0].count(b"\n") == 9 and a[0].count(b",False,") == 2  # 8 clips, 2 fail
