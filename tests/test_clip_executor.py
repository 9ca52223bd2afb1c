"""The per-clip map (agl.executor.map_clips): the same results, in the items' order, for any
`jobs`; each worker loads its task's model once; bad `jobs` values are one line. And each
curation stage writes the same bytes with `jobs: 1` and `jobs: 2` (a few demo clips).
The same stages on a Ray mini-cluster: tests/ray_suite.py."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agl.core import canonical
from agl.core.checks import check_params
from agl.errors import AglError
from agl.executor import ClipTask, map_clips
from agl.executor.config import RayConfig
from agl.executor.ray_connect import actor_pool_size


@dataclass(frozen=True)
class Squares(ClipTask):
    """A cheap task: each result names the process that ran it and how often it set up."""

    fail_on: str = ""

    def setup(self) -> dict[str, int]:
        return {"setups": 1}

    def run(self, state: dict[str, int], item: tuple) -> tuple[str, int, int, int]:
        key, n = item
        if key == self.fail_on:
            raise AglError(f"clip {key}: cannot be measured")
        state["clips"] = state.get("clips", 0) + 1
        return key, n * n, os.getpid(), state["setups"]


def test_results_in_item_order_for_any_jobs_and_one_setup_per_worker():
    items = [(f"k{i}", i) for i in (5, 3, 9, 1, 7, 2)]  # not sorted: the order given is kept
    one = map_clips(Squares(), items, jobs=1)
    facts: dict[str, Any] = {}
    two = map_clips(Squares(), items, jobs=2, facts=facts)
    assert [r[:2] for r in one] == [r[:2] for r in two] == [(k, n * n) for k, n in items]
    assert facts == {"executor": "local", "jobs": 2}
    assert len({r[2] for r in one}) == 1 and one[0][2] == os.getpid()  # jobs 1: this process
    assert os.getpid() not in {r[2] for r in two} and all(r[3] == 1 for r in two)  # set up once each
    assert map_clips(Squares(), [], jobs=2) == []
    with pytest.raises(AglError, match="clip 'k1' is listed twice"):
        map_clips(Squares(), [("k1", 1), ("k1", 2)])
    for jobs in (1, 2):  # a task's error stops the map as the same one line, from a worker too
        with pytest.raises(AglError, match="^clip k3: cannot be measured$"):
            map_clips(Squares(fail_on="k3"), items, jobs=jobs)


def test_the_actor_pool_counts_only_nodes_that_can_hold_an_actor():
    # The usual layout: a head started with 0 CPUs and worker nodes. An actor sized for the
    # head is never placed, so the stage would wait for it forever (benchmarks/paper_scale.py
    # hung there with one worker node and two shards).
    head = {"Alive": True, "Resources": {"memory": 1e9}}
    worker = {"Alive": True, "Resources": {"CPU": 1.0}}
    dead = {"Alive": False, "Resources": {"CPU": 8.0}}
    gpu = {"Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}}
    assert actor_pool_size([head, worker, dead], RayConfig(), shards=2) == 1
    assert actor_pool_size([head, worker, worker, gpu], RayConfig(), shards=16) == 3
    assert actor_pool_size([head, worker, gpu], RayConfig(num_gpus=1), shards=16) == 1
    assert actor_pool_size([head, worker, gpu], RayConfig(num_cpus=2), shards=16) == 1
    assert actor_pool_size([head], RayConfig(), shards=4) == 1  # none fits: one, and Ray says why
    assert actor_pool_size([worker] * 8, RayConfig(), shards=3) == 3
    assert actor_pool_size([head, worker], RayConfig(actors=5), shards=16) == 5  # as asked


def test_bad_jobs_are_one_line():
    from agl.birds.birdnet import BirdConfig
    from agl.curation.filtering import FilterConfig
    from agl.curation.tagging import TagConfig
    from agl.speech.listen import SpeechConfig

    for cls, section in ((TagConfig, "tag"), (BirdConfig, "birds"), (SpeechConfig, "speech"),
                         (FilterConfig, "filter")):
        for bad in (0, -2, 1.5, "two", True):
            with pytest.raises(AglError) as err:
                cls.from_params({"jobs": bad})
            text = str(err.value)
            assert f"params.yaml {section}" in text and "jobs" in text and "\n" not in text, text
        assert cls.from_params({"jobs": 2}).jobs == 2
    for key in ("filter.jobs", "tag.jobs", "birds.jobs", "speech.jobs", "counterfactual.jobs"):
        with pytest.raises(AglError, match=rf"params.yaml {key}: 0 is not a whole number of at least 1"):
            check_params(key, 0)
        check_params(key, 2)


# --- each curation stage, jobs 1 and 2 ----------------------------------------------------------

KEYS = ("demo_0001", "demo_0002", "demo_0003")  # birdsong, speech, a third scene


@pytest.fixture(scope="module")
def few(demo_data):
    from agl.dataset.manifest import clips, load_manifest

    manifest = load_manifest(demo_data / "manifest.csv")
    items = [(c.key, demo_data / "audio" / c.relpath) for c in clips(manifest) if c.key in KEYS]
    assert [k for k, _ in items] == list(KEYS)
    return manifest, items


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def test_tag_and_birds_write_the_same_bytes_for_jobs_1_and_2(few, tmp_path):
    from agl.birds.birdnet import BirdConfig, detections_jsonl, frame, run_birds
    from agl.curation.tagging import TagConfig, tag_clips

    manifest, items = few
    got = {}
    for jobs in (1, 2):
        out = tmp_path / str(jobs)
        out.mkdir()
        run = tag_clips(items, TagConfig(jobs=jobs), manifest)  # precomputed + the VAD
        canonical.write_csv(run.frame(), out / "tags.csv")
        canonical.write_json(out / "tag_summary.json", canonical.split(run.summary(), ("wall_s",))[0])
        results, info, _ = run_birds(items, BirdConfig(jobs=jobs))
        canonical.write_csv(frame(results), out / "birds.csv")
        (out / "birds.jsonl").write_text(detections_jsonl(results))
        canonical.write_json(out / "birds_summary.json", info)
        got[jobs] = _digest(*out.iterdir())
    assert got[1] == got[2]


def test_speech_writes_the_same_bytes_for_jobs_1_and_2(few, tmp_path):
    from agl.speech.listen import SpeechConfig
    from agl.speech.tables import frame, run_speech, windows_jsonl

    _, items = few
    got = {}
    for jobs in (1, 2):  # no heard cache: every clip is heard, by Whisper where there is speech
        cfg = SpeechConfig(jobs=jobs, heard_cache=None, cache_dir=str(tmp_path / "whisper"))
        results, info, _ = run_speech(items[:2], cfg)
        got[jobs] = (canonical.canonical(frame(results).to_dict("records"), None), windows_jsonl(results), info)
    assert got[1] == got[2]
    assert got[1][2]["listened"] == 2


def test_perturb_writes_the_same_files_for_jobs_1_and_2(demo_data, tmp_path):
    from agl.counterfactual.effects import Subset, derive_dataset
    from agl.counterfactual.perturb import parse_perturb

    levels = parse_perturb({"mask": {"kind": "mask_speech", "seed": 0}})["mask"]
    got = {}
    for jobs in (1, 2):
        out = tmp_path / f"mask{jobs}"
        summary = derive_dataset(demo_data, out, levels, subset=Subset(size=3, seed=0), jobs=jobs)
        files = sorted(p for p in out.rglob("*") if p.is_file())
        got[jobs] = (summary, [p.relative_to(out) for p in files], _digest(*files))
    assert got[1] == got[2]
    assert got[1][0]["clips"] == 3
