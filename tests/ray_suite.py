"""The ray executor on a real Ray mini-cluster (a head and 2 worker nodes on 127.0.0.1).

Not collected by the suite itself (no `test_` prefix): tests/test_ray_transport.py runs this
file in a private network namespace (`unshare -n`, loopback only), because Ray binds and
dials the machine's interface address otherwise. The cluster starts once for the whole file
(about 15 s), every test shares it.

Each test runs one model with `executor: local` and then with `executor: ray`, each into its
own run folder, and compares the tracked files byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import psutil  # Ray's own dependency
import pytest
from fake_llm import Answer, FakeServer, openai_completion
from test_inference_api import make_clips

from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.executor.config import ExecutorConfig, RayConfig
from agl.executor.shards import plan_shards
from agl.inference.model_run import run_inference
from agl.inference.runner import Backoff, RunOptions
from agl.prompts import load_prompt

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install -e '.[ray]'")

@pytest.fixture(scope="session")
def cluster():
    from ray.cluster_utils import Cluster

    # A dead node is noticed in about a second instead of Ray's default 15 s.
    # No idle Python workers started ahead of need (Ray's default: one per CPU on each node,
    # six processes importing Ray on a 2-core machine running the rest of the suite beside).
    fast = {"health_check_period_ms": 500, "health_check_failure_threshold": 4,
            "health_check_timeout_ms": 1000, "enable_worker_prestart": False,
            "prestart_worker_first_driver": False,
            # Ray runs its workers at nice 15 by default: beside the rest of the suite (the
            # other xdist workers at nice 0) they got almost no CPU, and the suite took 485 s
            # instead of 90 under four workers. At 0 they take their fair share.
            "worker_niceness": 0}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                      "_system_config": fast})
    workers = [c.add_node(num_cpus=2) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
    yield c, workers
    ray.shutdown()
    c.shutdown()


def answer_by_clip(sha_to_key, delay_s: float = 0.0, log: list | None = None):
    """A deterministic reply per clip (its longitude), so records differ from clip to clip."""
    def answer(call):
        if not call.audio_sha256:  # a body cut short: its sender's node died while it was sent
            return Answer(drop=True)
        key = sha_to_key[call.audio_sha256[0]]
        if log is not None:
            log.append((key, "start", time.time()))
        i = int(key.split("_")[1])
        text = json.dumps({"city": "Berlin", "country": "Germany", "continent": "Europe",
                           "latitude": 50.0 + i / 10, "longitude": 10.0 + i, "confidence": 0.5})
        if delay_s:
            time.sleep(delay_s)
        if log is not None:
            log.append((key, "end", time.time()))
        return Answer(200, openai_completion(text))
    return answer


def openai_setup(tmp_path: Path, n: int):
    manifest, audio = make_clips(tmp_path, n)
    sha = {hashlib.sha256((audio / f"clip_{i:03d}" / "a.wav").read_bytes()).hexdigest(): f"clip_{i:03d}"
           for i in range(n)}
    return clips(load_manifest(manifest)), audio, sha


def run(spec, cl, audio, out, *, transport=None, cache=None, concurrency=2):
    options = RunOptions(cache_dir=cache, concurrency=concurrency, timeout_s=30, max_retries=2,
                         backoff=Backoff(base_s=0.01, cap_s=0.05), progress=False,
                         transport=transport or ExecutorConfig())
    return run_inference(spec, load_prompt(), cl, out_dir=out, audio_root=audio, options=options)


def ray_cfg(c, shards: int, **kw) -> ExecutorConfig:
    return ExecutorConfig(kind="ray", ray=RayConfig(address=c.address, shards=shards, **kw))


def tracked(out: Path) -> tuple[bytes, bytes]:
    return (out / "predictions.jsonl").read_bytes(), (out / "run_summary.json").read_bytes()


def timings(out: Path) -> dict:
    return json.loads((out / "run_summary.timings.json").read_text())


def test_api_backend_shards_match_local_byte_for_byte(cluster, tmp_path):
    c, _ = cluster
    cl, audio, sha = openai_setup(tmp_path, 20)
    with FakeServer(answer_by_clip(sha)) as server:
        spec = ModelSpec("fake", "openai-compatible", "fake",
                         settings={"base_url": server.url + "/v1", "temperature": 0})
        run(spec, cl, audio, tmp_path / "local")
        local = tracked(tmp_path / "local")
        assert len(server.calls) == 20
        for shards in (1, 7):  # one shard; more shards than nodes, 20 clips split unevenly
            before = len(server.calls)
            out = tmp_path / f"ray{shards}"
            run(spec, cl, audio, out, transport=ray_cfg(c, shards), cache=tmp_path / f"cache{shards}")
            assert tracked(out) == local, shards
            asked = Counter(sha[x.audio_sha256[0]] for x in server.calls[before:])
            assert sorted(asked) == sorted(x.key for x in cl) and set(asked.values()) == {1}
            facts = timings(out)["ray"]
            assert facts["shards"] == min(shards, 20) and not facts["failed_shards"]
            assert sum(r["asked"] for r in facts["shard_results"]) == 20

        # The driver answers from the cache before planning: no shard, no request.
        before = len(server.calls)
        out = tmp_path / "ray7-again"
        run(spec, cl, audio, out, transport=ray_cfg(c, 4), cache=tmp_path / "cache7")  # filled by the 7-shard run
        assert tracked(out) == local and len(server.calls) == before
        assert timings(out)["ray"] == {**timings(out)["ray"], "shards": 0, "from_cache": 20}

        # A resumed run (half the records there) asks only for the missing clips.
        out = tmp_path / "ray-resume"
        out.mkdir()
        lines = local[0].decode().splitlines(keepends=True)
        (out / "predictions.jsonl").write_text("".join(lines[::2]))
        run(spec, cl, audio, out, transport=ray_cfg(c, 4))
        assert tracked(out) == local and len(server.calls) == before + 10


def test_model_actor_pool_matches_local(cluster, tmp_path, family_model, real_mp3s):
    """A tiny random transformers family: actors load it once and serve every shard."""
    if not real_mp3s:
        pytest.skip("no real MP3s under ../shared/data/agl1k/archive (tests/helpers.py)")
    from test_backend_transformers import mp3_manifest

    c, _ = cluster
    root = tmp_path / "audio"
    for i in range(6):  # six clips from the shared MP3s (cycled), each its own key
        src = real_mp3s[i % len(real_mp3s)]
        (root / f"k{i}").mkdir(parents=True)
        shutil.copy(src, root / f"k{i}" / src.name)
    cl = mp3_manifest(tmp_path, sorted(root.glob("*/*.mp3")))
    spec = ModelSpec("tiny", "transformers", str(family_model("qwen2_audio")),
                     settings={"device": "cpu", "max_new_tokens": 6, "max_seconds": 4})
    run(spec, cl, root, tmp_path / "local")
    local = tracked(tmp_path / "local")
    for shards in (5,):  # two actors serve five shards of six clips: a model copy is reused
        out = tmp_path / f"ray{shards}"
        run(spec, cl, root, out, transport=ray_cfg(c, shards, actors=2))
        assert tracked(out) == local, shards
        facts = timings(out)["ray"]
        served = {r["node"] for r in facts["shard_results"]}
        assert facts["shards"] == min(shards, 6) and len(served) >= 1 and not facts["failed_shards"]


def test_worker_node_killed_mid_run_completes_identically(cluster, tmp_path):
    """A worker node removed without grace while its shards are in flight: Ray reruns them
    elsewhere, each asks only its missing clips, and the records match a local run."""
    c, workers = cluster
    n = 48
    cl, audio, sha = openai_setup(tmp_path, n)
    log: list = []
    with FakeServer(answer_by_clip(sha, delay_s=0.15, log=log)) as server:
        spec = ModelSpec("fake", "openai-compatible", "fake",
                         settings={"base_url": server.url + "/v1", "temperature": 0})
        run(spec, cl, audio, tmp_path / "local", concurrency=4)
        local = tracked(tmp_path / "local")
        log.clear()
        before = len(server.calls)
        victim = workers[0]
        killed = {}

        port = urlsplit(server.url).port
        raylet = psutil.Process(victim.all_processes["raylet"][0].process.pid)

        def victim_sending() -> bool:
            """A shard on the victim is connected to the server: started (its attempt noted
            by the collector) and not done (a finished shard closes its client)."""
            for worker in raylet.children():  # the node's Ray workers
                with contextlib.suppress(psutil.Error):
                    if any(c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
                           for c in worker.net_connections(kind="tcp")):
                        return True
            return False

        def kill_when_busy():
            # Not "12 replies in all": under load one node's shards can run their whole
            # six clips while the others still import, so the victim was sometimes idle
            # (its shards done, or leased but not started) when killed, and nothing of its
            # was rerun. Wait for the victim itself to be sending.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not victim_sending():
                time.sleep(0.02)
            killed["at"] = time.monotonic()
            c.remove_node(victim, allow_graceful=False)
            killed["done"] = time.monotonic()

        killer = threading.Thread(target=kill_when_busy, daemon=True)
        killer.start()
        out = tmp_path / "ray"
        run(spec, cl, audio, out, transport=ray_cfg(c, 8, max_retries=3), concurrency=2)
        killer.join(30)
        assert tracked(out) == local
        cut = [x for x in server.calls[before:] if not x.audio_sha256]  # sent half by the dead node
        asked = Counter(sha[x.audio_sha256[0]] for x in server.calls[before:] if x.audio_sha256)
        assert set(asked) == {x.key for x in cl}
        twice = {k for k, v in asked.items() if v > 1}
        # A clip asked twice belongs to a shard whose first attempt ran on the killed node and
        # was rerun: its request was in flight there (the node's workers outlive its raylet
        # by a moment) and the rerun asked it again, once; no other clip is asked twice.
        facts = timings(out)["ray"]
        shard_of = {k: i for i, ids in enumerate(plan_shards([x.key for x in cl], 8)) for k in ids}
        tries: dict[int, list] = {}
        for a in sorted(facts["attempts"], key=lambda a: a["at"]):
            tries.setdefault(a["shard"], []).append(a["node"])
        retried = {s for s, nodes in tries.items() if len(nodes) > 1}
        assert retried and all(tries[s][0] == victim.node_id for s in retried)
        assert all(asked[k] == 2 and shard_of[k] in retried for k in twice)
        assert sum(facts["duplicates_dropped"].values()) <= len(twice)
        print(f"\nnode kill: {len(twice)} of {n} clips asked twice (in flight at the kill; "
              f"{len(cut)} request(s) cut off mid-body), "
              f"{sum(facts['duplicates_dropped'].values())} late reply dropped by the collector; "
              f"shards retried: {sorted(retried)}; "
              f"remove_node took {killed['done'] - killed['at']:.2f} s")
    workers[0] = c.add_node(num_cpus=2)  # the next test has its two workers again
    c.wait_for_nodes()


def test_demo_infer_stages_on_ray_match_local(cluster, tmp_path, monkeypatch, demo_data):
    """The demo's infer@<model> stages (stages/infer.py, as `dvc repro` runs them) with
    AGL_EXECUTOR=ray write the same tracked outputs as with the default executor: with no
    stage declaring `executor`, dvc.lock stays as it is (tests/test_ray_transport.py)."""
    import sys

    import yaml

    c, _ = cluster
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "stages"))
    import infer as infer_stage

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["infer"]["cache_dir"] = str(tmp_path / "cache")  # never the checkout's cache
    params["executor"]["ray"].update(shards=4, actors=1)  # one model copy: the test's time
    # knn hears in 30-s windows on the demo; windows are cut by the local executor only (the ray
    # executor sends whole files and refuses the mode in one line): here knn hears natively.
    params["models"]["knn"].pop("long_audio", None)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copytree(demo_data, tmp_path / "data")  # the session's demo set (conftest.py)
    monkeypatch.chdir(tmp_path)
    # Two of the demo's five: random (a pure function of the clip id) and knn (features read
    # from each clip's audio), both as shards of plain tasks, the path random-sphere and prior
    # take too. langprior (Whisper language ID, about 100 s per run of the 32 demo clips on
    # the shared 2-core machine) takes the model-actor path that
    # test_model_actor_pool_matches_local runs with the tiny transformers family.
    for name in ("random", "knn"):
        outs = {}
        for kind in ("local", "ray"):
            if kind == "ray":
                monkeypatch.setenv("AGL_EXECUTOR", "ray")
                monkeypatch.setenv("AGL_RAY_ADDRESS", c.address)
            shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # each answers every clip itself
            out = tmp_path / kind / name
            rc = infer_stage.main(["--name", name, "--manifest", "data/manifest.csv", "--audio-root",
                                   "data/audio", "--out", str(out), "--params", str(tmp_path / "params.yaml"),
                                   "--telemetry", str(tmp_path / "telemetry.json")])
            assert rc == 0
            outs[kind] = tracked(out)
            monkeypatch.delenv("AGL_EXECUTOR", raising=False)
            monkeypatch.delenv("AGL_RAY_ADDRESS", raising=False)
        assert outs["ray"] == outs["local"], name
        assert "ray" in timings(tmp_path / "ray" / name) and "ray" not in timings(tmp_path / "local" / name)


def test_ctrl_c_cancels_the_shards_and_keeps_every_answered_clip(cluster, tmp_path):
    """`agl infer --executor ray --ray-address ADDR`, interrupted: exit 130, every clip
    answered before the interrupt is in predictions.jsonl, and the rerun asks only the rest."""
    import signal
    import subprocess
    import sys

    from helpers import subprocess_env
    from test_inference_resume import wait_for_lines

    c, _ = cluster
    n = 12
    manifest, audio = make_clips(tmp_path, n)
    sha = {hashlib.sha256((audio / f"clip_{i:03d}" / "a.wav").read_bytes()).hexdigest(): f"clip_{i:03d}"
           for i in range(n)}
    gate = {"open": 4}
    reply = answer_by_clip(sha)
    lock = threading.Lock()

    def answer(call):
        with lock:
            if gate["open"] <= 0:
                return Answer(hold=True)  # in flight at the interrupt: never answered
            gate["open"] -= 1
        return reply(call)

    with FakeServer(answer) as server:
        cmd = [sys.executable, "-m", "agl.cli", "infer", "--backend", "openai-compatible", "--model", "fake",
               "--base-url", server.url + "/v1", "--setting", "temperature=0", "--manifest", str(manifest),
               "--audio-root", str(audio), "--out", str(tmp_path / "run"), "--cache-dir", "",
               "--retries", "0", "--no-progress", "--executor", "ray", "--ray-address", c.address,
               "--ray-shards", "3"]
        env = subprocess_env()
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, cwd=tmp_path)
        wait_for_lines(tmp_path / "run" / "predictions.jsonl", 4, proc, timeout=120)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, proc.stderr.read().decode()
        kept = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
        assert len(kept) == 4
        first = len(server.calls)
        gate["open"] = 10**9
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=180)
        assert done.returncode == 0, done.stderr
        again = Counter(sha[x.audio_sha256[0]] for x in server.calls[first:])
        answered_first = {json.loads(x)["sample_id"] for x in kept}
        assert set(again) == {f"clip_{i:03d}" for i in range(n)} - answered_first
        assert set(again.values()) == {1}
        assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == n


def test_a_retired_model_in_a_shard_stops_the_run_as_locally(cluster, tmp_path):
    """ModelGone raised inside a shard is the run's failure: the driver re-raises it (not a
    FAILED record per clip), cancels the other shards, and each shard sent at most its one
    probe request (Backend.probe_first)."""
    from agl.errors import ModelGone

    c, _ = cluster
    cl, audio, _ = openai_setup(tmp_path, 12)
    gone = {"object": "error", "message": "The model `old` does not exist.",
            "type": "NotFoundError", "param": None, "code": 404}
    with FakeServer(lambda call: Answer(404, gone)) as server:
        spec = ModelSpec("old", "openai-compatible", "old",
                         settings={"base_url": server.url + "/v1", "temperature": 0})
        with pytest.raises(ModelGone) as local:
            run(spec, cl, audio, tmp_path / "local")
        with pytest.raises(ModelGone) as remote:
            run(spec, cl, audio, tmp_path / "ray", transport=ray_cfg(c, 3))
        sent = len(server.calls)
    assert type(remote.value) is ModelGone and str(remote.value) == str(local.value)
    assert remote.value.provider_message == local.value.provider_message
    assert sent <= 1 + 3, sent
    assert not (tmp_path / "ray" / "predictions.jsonl").exists() or \
        not (tmp_path / "ray" / "predictions.jsonl").read_text().strip()


def _kill_when(c, victim, seen, killed: dict) -> threading.Thread:
    """A thread that removes `victim` without grace as soon as `seen()` is true (the stage
    has produced its first clip somewhere, so every actor still holds a shard)."""
    def run():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not seen():
            time.sleep(0.02)
        killed["at"] = time.monotonic()
        c.remove_node(victim, allow_graceful=False)
        killed["done"] = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_curation_speech_and_mask_speech_on_ray_match_local_through_a_node_kill(cluster, tmp_path,
                                                                                monkeypatch, demo_data):
    """Issue 43's floor: the speech stage and perturb@mask_speech (stages/*.py, as `dvc repro`
    runs them) on six demo clips, with AGL_EXECUTOR=ray, write what they write locally, byte
    for byte, while a worker node is removed mid-stage: its actor restarts elsewhere and the
    shards it held run again (agl.executor.ray_map)."""
    import sys

    import yaml

    from agl.dataset.manifest import load_manifest, write_manifest

    c, workers = cluster
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "stages"))
    import perturb as perturb_stage
    import speech as speech_stage

    # Six clips, four with speech; three actors (one per node), each holding two one-clip
    # shards of which the second is a speech clip (Whisper: seconds), so the victim still holds
    # one when the first clip heard anywhere trips the kill. (With two speech clips in six, an
    # actor given two clips without speech finished both before the kill.)
    keys = ["demo_0001", "demo_0002", "demo_0003", "demo_0005", "demo_0010", "demo_0011"]
    data = tmp_path / "data"
    frame = load_manifest(demo_data / "manifest.csv")
    frame = frame[frame["key"].isin(keys)].reset_index(drop=True)
    for key in keys:
        shutil.copytree(demo_data / "audio" / key, data / "audio" / key)
    write_manifest(frame, data / "manifest.csv")
    (tmp_path / "filter.csv").write_text("key,passed\n" + "".join(f"{k},True\n" for k in keys))
    monkeypatch.chdir(tmp_path)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["speech"]["cache_dir"] = str(tmp_path / "whisper")

    def speech(kind: str) -> tuple[bytes, ...]:
        params["speech"]["heard_cache"] = str(tmp_path / f"heard-{kind}")  # each hears every clip
        (tmp_path / f"{kind}.yaml").write_text(yaml.safe_dump(params))
        out = tmp_path / f"speech-{kind}"
        assert speech_stage.main(["--manifest", "data/manifest.csv", "--audio-root", "data/audio", "--filter",
                                  "filter.csv", "--out", f"{out}/speech.csv", "--windows", f"{out}/w.jsonl",
                                  "--summary", f"{out}/summary.json", "--params", f"{kind}.yaml"]) == 0
        return tuple((out / n).read_bytes() for n in ("speech.csv", "w.jsonl", "summary.json"))

    def perturb(kind: str) -> dict[str, bytes]:
        out = tmp_path / f"perturb-{kind}"
        assert perturb_stage.main(["mask_speech", "data", str(out), f"{out}.json"]) == 0
        files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        return {**files, "summary": Path(f"{out}.json").read_bytes()}

    took = {"start": time.monotonic()}
    local = speech("local"), perturb("local")
    took["local"] = time.monotonic()
    assert json.loads(local[0][2])["speech_heard"] >= 1 and len(local[1]) == 6 + 3 + 1  # audio, level files, summary

    monkeypatch.setenv("AGL_EXECUTOR", "ray")
    monkeypatch.setenv("AGL_RAY_ADDRESS", c.address)
    victim, killed = workers[0], {}
    killer = _kill_when(c, victim, lambda: any((tmp_path / "heard-ray").rglob("*.json")), killed)
    t0 = time.monotonic()
    assert speech("ray") == local[0]
    killer.join(60)
    assert t0 < killed["at"] < time.monotonic(), "the node was not removed while the stage ran"
    facts = json.loads((tmp_path / "speech-ray" / "summary.timings.json").read_text())["ray"]
    held = {n for n in range(facts["shards"]) if facts["actor_nodes"][n % facts["actors"]] == victim.node_id}
    served = {r["shard"]: r["node"] for r in facts["shard_results"]}
    assert held and any(served[n] != victim.node_id for n in held), facts  # ran again elsewhere
    took["speech"] = time.monotonic()
    workers[0] = c.add_node(num_cpus=2)
    c.wait_for_nodes()
    took["node"] = time.monotonic()

    victim, killed = workers[0], {}
    killer = _kill_when(c, victim, lambda: any(p.is_file() for p in (tmp_path / "perturb-ray").rglob("*")), killed)
    t0 = time.monotonic()
    assert perturb("ray") == local[1]  # no temporary of the killed writer left behind either
    killer.join(60)
    assert t0 < killed["at"] < time.monotonic(), "the node was not removed while the stage ran"
    took["perturb"] = time.monotonic()
    print(f"\ncuration node kill: speech shards {sorted(held)} re-served on "
          f"{sorted({served[n][:8] for n in held})}; remove_node took {killed['done'] - killed['at']:.2f} s; "
          f"local runs {took['local'] - took['start']:.1f} s, speech on ray {took['speech'] - took['local']:.1f} s, "
          f"a node back {took['node'] - took['speech']:.1f} s, perturb on ray {took['perturb'] - took['node']:.1f} s")
    workers[0] = c.add_node(num_cpus=2)  # the next test has its two workers again
    c.wait_for_nodes()
