"""The executor is transport: params.yaml `executor:` checked, shards planned purely, Ray
optional and never imported by default, the cluster scripts real; and the Ray mini-cluster
tests (tests/ray_suite.py) run in a private network namespace.

Ray binds and dials the machine's interface address unless it has none but loopback, so
the suite that starts a cluster runs under `unshare -n` (a new network namespace with only
`lo` up): its traffic cannot leave 127.0.0.1 (docs/testing.md).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import subprocess_env

from agl.errors import AglError
from agl.executor.config import ExecutorConfig, RayConfig
from agl.executor.shards import plan_shards

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "scripts" / "cluster"
HAS_RAY = importlib.util.find_spec("ray") is not None


def _netns_works() -> bool:
    try:
        return subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_ray_mini_cluster_suite_in_a_private_network():
    """tests/ray_suite.py: a head and 2 worker nodes, started once, every Ray test on it."""
    if not HAS_RAY:
        pytest.skip('the ray extra is not installed: pip install -e ".[ray]"')
    if not _netns_works():
        pytest.skip("`unshare -n` is not permitted here (needs root or user namespaces): Ray "
                    "would bind the machine's interface address, and tests stay on 127.0.0.1")
    inner = (f"ip link set lo up && exec {shlex.quote(sys.executable)} -m pytest -p no:xdist "
             "-p no:cacheprovider -q -s tests/ray_suite.py")
    env = subprocess_env(HF_HUB_OFFLINE="1")
    done = subprocess.run(["unshare", "-n", "sh", "-c", inner], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    # Ray's own warnings on stderr, then pytest's report (which test failed, and why) last.
    tail = "\n".join(done.stderr.splitlines()[-20:] + done.stdout.splitlines()[-80:])
    assert done.returncode == 0, tail
    assert re.search(r"\b[4-9] passed\b", done.stdout), tail
    print(tail)


def test_shards_are_a_pure_interleaved_function_of_the_ids():
    ids = [f"k{i:03d}" for i in range(10)]
    shards = plan_shards(ids, 4)
    assert shards == [("k000", "k004", "k008"), ("k001", "k005", "k009"), ("k002", "k006"),
                      ("k003", "k007")]
    assert plan_shards(list(reversed(ids)), 4) == shards  # the order given never matters
    assert plan_shards(ids, 16) == [(k,) for k in ids]  # no empty shard
    assert plan_shards(ids, 1) == [tuple(ids)]
    with pytest.raises(ValueError):
        plan_shards(["a", "a"], 2)


def test_executor_section_checked_and_overridden_per_model():
    cfg = ExecutorConfig.from_params({"kind": "local", "ray": {"shards": 8},
                                      "models": {"big": {"kind": "ray", "ray": {"num_gpus": 1}}}})
    assert cfg.for_model("small") == ExecutorConfig(ray=RayConfig(shards=8))
    big = cfg.for_model("big")
    assert big.kind == "ray" and big.ray.num_gpus == 1 and big.ray.shards == 8
    flags = ExecutorConfig().with_flags("ray", "ray://head:10001", 4)
    assert (flags.kind, flags.ray.address, flags.ray.shards) == ("ray", "ray://head:10001", 4)
    assert ExecutorConfig.from_params(None) == ExecutorConfig()
    for bad, says in [({"kind": "slurm"}, "executor.kind: 'slurm' is not one of local, ray"),
                      ({"ray": {"shard": 2}}, "executor.ray: unknown key(s) shard"),
                      ({"ray": {"shards": 0}}, "executor.ray.shards: 0 is not a whole number of at least 1"),
                      ({"models": {"x": {"ray": {"max_retries": -1}}}},
                       "executor.models.x.ray.max_retries: -1 is not a whole number, 0 or more")]:
        with pytest.raises(AglError) as err:
            ExecutorConfig.from_params(bad)
        assert says in str(err.value) and "\n" not in str(err.value)


def test_no_stage_declares_the_executor_and_infer_and_listen_read_it():
    """Transport: never a declared param (dvc.lock and every output stay as they are when a
    run moves to a cluster); the infer and listen stages, and the curation stages whose
    per-clip work it carries (agl.executor.map_clips), read it outside `_params.load`."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    for name, stage in stages.items():
        body = stage.get("do", stage)
        for p in body.get("params", []):
            key = p if isinstance(p, str) else next(iter(p))
            assert not str(key).startswith("executor"), name
        # the wing's code (src/agl/executor) is a dep like any package; the section never is
        assert not any("executor" in str(d) for d in body.get("deps", []) if d != "src/agl/executor"), name
    for script in ("infer.py", "listen.py", "filter.py", "tag.py", "birds.py", "speech.py", "perturb.py"):
        assert "read_transport(" in (REPO / "stages" / script).read_text(encoding="utf-8"), script
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    assert ExecutorConfig.from_params(params["executor"]).kind == "local"  # the offline default


def test_importing_agl_and_the_default_executor_never_import_ray():
    code = ("import sys, agl, agl.cli, agl.inference.model_run, agl.inference.executors as e; "
            "from agl.executor.config import read_transport; e.available_executors(); "
            "e.get_executor('ray'); read_transport('params.yaml'); "
            "import agl.executor as x; x.get_clip_executor('ray'); "
            "from agl.curation.filtering import run_filter, FilterConfig; run_filter([], FilterConfig()); "
            "assert 'ray' not in sys.modules, 'ray imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _infer(tmp_path: Path, *flags: str, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    from test_inference_api import make_clips

    manifest, audio = make_clips(tmp_path, 2)
    env = subprocess_env()
    if pythonpath:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    cmd = [sys.executable, "-m", "agl.cli", "infer", "--backend", "random", "--model", "m",
           "--manifest", str(manifest), "--audio-root", str(audio), "--out", str(tmp_path / "run"),
           "--cache-dir", "", "--no-progress", *flags]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_executor_ray_without_ray_says_how_to_install(tmp_path):
    blocked = tmp_path / "blocked"
    (blocked / "ray").mkdir(parents=True)
    (blocked / "ray" / "__init__.py").write_text("raise ImportError('ray is not installed')\n")
    done = _infer(tmp_path, "--executor", "ray", pythonpath=str(blocked))
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert 'pip install -e ".[ray]"' in done.stderr
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


@pytest.mark.skipif(not HAS_RAY, reason='the ray extra is not installed: pip install -e ".[ray]"')
def test_unreachable_cluster_is_one_line_naming_it(tmp_path):
    done = _infer(tmp_path, "--executor", "ray", "--ray-address", "127.0.0.1:9")
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "cannot reach the Ray cluster at 127.0.0.1:9" in done.stderr


# --- the cluster scripts and manifests (docs/cluster.md) -------------------------------------

def _agl_flags() -> set[str]:
    from agl.cli import build_parser

    flags: set[str] = set()
    parser = build_parser()
    for action in parser._subparsers._group_actions:  # argparse keeps its subcommands here
        for sub in action.choices.values():
            flags |= {o for a in sub._actions for o in a.option_strings}
    return flags


def _ray_start_flags() -> set[str]:
    from ray.scripts.scripts import start  # the click command behind `ray start`

    return {o for p in start.params for o in (*p.opts, *p.secondary_opts)}


def _commands(text: str) -> list[list[str]]:
    """The `agl ...` and `ray start ...` command lines of a shell script (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        for part in re.split(r"&&|\|\||;|\$\(|\bexec\b|\bsrun\b[^a-z]*(?=ray|agl)", line):
            words = shlex.split(part.replace('"', " ").replace("'", " "), comments=True)
            for i, w in enumerate(words):
                if w in ("agl", "ray") and i + 1 < len(words) and words[i + 1] in ("infer", "start"):
                    out.append(words[i:])
                    break
    return out


def test_cluster_scripts_parse_and_use_real_flags():
    scripts = sorted(CLUSTER.glob("*.sh")) + sorted(CLUSTER.glob("*.sbatch"))
    manifests = sorted(CLUSTER.glob("*.yaml"))
    assert scripts and manifests
    agl_flags = _agl_flags()
    ray_flags = _ray_start_flags() if HAS_RAY else None
    seen = {"agl": 0, "ray": 0}
    texts = []
    for path in scripts:
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, path
        texts.append(path.read_text(encoding="utf-8"))
    for path in manifests:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        job = next(d for d in docs if d.get("kind") == "RayJob")
        assert job["apiVersion"] == "ray.io/v1"
        spec = job["spec"]
        assert spec["rayClusterSpec"]["headGroupSpec"] and spec["rayClusterSpec"]["workerGroupSpecs"]
        texts.append(spec["entrypoint"])
        groups = [spec["rayClusterSpec"]["headGroupSpec"], *spec["rayClusterSpec"]["workerGroupSpecs"]]
        if ray_flags is not None:  # KubeRay turns rayStartParams into `ray start --KEY=VALUE`
            for g in groups:
                assert {f"--{k}" for k in g["rayStartParams"]} <= ray_flags, g["rayStartParams"]
        for env in (c.get("env", []) for g in groups for c in g["template"]["spec"]["containers"]):
            assert not any("KEY" in e["name"] and "value" in e for e in env), "a key written in a manifest"
    for text in texts:
        for words in _commands(text):
            flags = {w.split("=", 1)[0] for w in words if w.startswith("--")}
            known = agl_flags if words[0] == "agl" else ray_flags
            seen[words[0]] += 1
            if known is not None:
                assert flags <= known, (words, sorted(flags - known))
        for var in re.findall(r"\bAGL_[A-Z_]+", text):
            assert var in {"AGL_EXECUTOR", "AGL_RAY_ADDRESS"}, var
    assert seen["agl"] and seen["ray"]


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_what_a_killed_driver_left_of_its_local_ray_is_ended_by_the_next(tmp_path):
    """Ray's DashboardAgent and RuntimeEnvAgent outlived a kill -9 of the driver that started a
    local Ray (issue 49); the next driver ends them (agl.executor.ray_leftovers)."""
    if not HAS_RAY:
        pytest.skip('the ray extra is not installed: pip install -e ".[ray]"')
    if not _netns_works() or subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"],
                                            capture_output=True, timeout=20).returncode != 0:
        pytest.skip("`unshare -n -p` is not permitted here: the test needs its own network and "
                    "process namespaces (Ray on 127.0.0.1, and only its own processes in view)")
    inner = (f"ip link set lo up && exec {shlex.quote(sys.executable)} "
             f"{shlex.quote(str(REPO / 'tests' / 'ray_leftovers_script.py'))}")
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="aglray", dir="/tmp"))  # Ray's socket paths stay short
    env = subprocess_env(TMPDIR=str(short))
    done = subprocess.run(["unshare", "-n", "-p", "-f", "--mount-proc", "sh", "-c", inner], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert any("DashboardAgent" in p or "RuntimeEnvAgent" in p for p in out["left"]), out  # the leftovers
    assert out["ended"] >= 1 and out["after"] == [] and out["notes"] == [], out
    import shutil

    shutil.rmtree(short, ignore_errors=True)
