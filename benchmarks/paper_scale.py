"""The paper's scale, measured: what AGL1K (1,444 clips, 51.5 hours of audio) and 16 models cost
this pipeline, before anyone pays for it.

    python benchmarks/paper_scale.py [--quick] [--sample-clips 6] [--ray-clips 2] [--latency 2.0]
                                     [--metric-bootstrap 1000] [--keep DIR]
                                     [--only curation,ray,dvc,scoring]

Four parts, each printed as a table (the machine and its load first: the figures are only
as good as the moment they were taken on a shared machine):

curation   A stratified sample of AGL1K's durations (the published manifest in ../shared,
           `mp3seconds`: sorted, cut into --sample-clips strata of equal count, the median
           clip of each), made SYNTHETIC by the demo set's generator (agl.dataset.demo's
           recipes, 71% with speech as AGL1K's `human_sounds >= 0.1`) in AGL1K's own format,
           44.1 kHz stereo MP3 at 224 kbit/s. Each curation stage (filter, tag, birds,
           speech, perturb@* of params.yaml, every clip perturbed) runs as `dvc repro` runs
           it, one process, measured by os.wait4: wall, user CPU, peak RSS of its largest
           process. Each stage also runs on one 5 s clip: its fixed cost (imports, model
           load), so the marginal rate is (sample - fixed) / audio hours, and AGL1K's
           projection is fixed + rate x 51.5 h, on this 2-core host. The whole 51.5 h is
           not decoded here: 30 minutes on 2 shared cores would not hold it.
dvc        The demo set (32 clips) with 1, then 4, then 16 models in one workspace, as a lab
           adds them (offline baselines and OpenAI-compatible fake servers on 127.0.0.1
           answering after --latency seconds), the default interventions, every model in the
           counterfactual matrix: each `dvc repro`'s wall, stages run, the stage commands'
           wall (timed inside DVC), DVC's own wall and CPU per stage run, then a no-op
           `dvc repro` and `dvc status` (DVC alone: every stage checked, none run). At 16
           models: `dvc exp show` and `agl exp`, time and output width.
scoring    16 runs x 1,444 clips (AGL1K's manifest, SYNTHETIC predictions: skills from 0.3
           to 0.9, 10% refusals, 2% failures): evaluate (each run), judge, leaderboard,
           report and the clip explorer's export, time and output size.

--quick runs the curation part's filter stage alone on two 3 s clips and skips dvc and
scoring: every table keeps its rows ("not run"), so a test checks the shape in seconds.
Every child's CPU is reported beside its wall: on a machine shared with other jobs the wall
is noisy, user CPU less so.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("AGL_SHARED") or ROOT.parent / "shared")  # as the tests find it
AGL1K_MANIFEST = SHARED / "data" / "agl1k" / "geoLocalization_schema.csv"
AGL1K_CLIPS = 1444
SPEECH_SHARE = 1024 / 1442  # AGL1K clips with human_sounds >= 0.1 (the paper's split)
SAMPLE_RATE = 44_100  # AGL1K's MP3s: 44.1 kHz stereo, 192-256 kbit/s (../shared/README.md)
MP3_LEVEL = 0.3  # libsndfile's LAME at this compression level: 224 kbit/s CBR
CURATION = ("filter", "tag", "birds", "speech")
MODELS_AT = (1, 4, 16)
NOT_RUN = "not run"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_stage_cpu import _copy_tree, _stages_in_order  # noqa: E402  (the same work copy)


@dataclass(frozen=True)
class Measure:
    wall: float
    user: float
    sys: float
    rss_mb: float  # peak resident set of the largest process of the tree


TIME = shutil.which("time") or "/usr/bin/time"


def measured(cmd: list[str] | str, cwd: Path, env: dict[str, str], quiet: bool = True) -> Measure:
    """Wall, CPU and peak memory of one command and everything it waited for.

    The peak comes from GNU time's %M (the command's own largest process): a child forked from
    this process starts its peak at this process's size, so wait4's ru_maxrss would floor every
    stage at the benchmark's own memory."""
    argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        if Path(TIME).is_file():
            argv = [TIME, "-f", "%M", "-o", rss.name, *argv]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL if quiet else subprocess.PIPE,
                                stderr=subprocess.PIPE)
        err = proc.stderr.read()  # before waiting: a chatty stage must not block on a full pipe
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        peak = rss.read().strip().splitlines()
    code = os.waitstatus_to_exitcode(status)
    if code:
        lines = err.decode(errors="replace").strip().splitlines()
        sys.exit(f"failed ({code}): {cmd if isinstance(cmd, str) else ' '.join(cmd)}\n  "
                 + (lines[-1] if lines else ""))
    kib = int(peak[-1]) if peak and peak[-1].isdigit() else ru.ru_maxrss
    return Measure(wall, ru.ru_utime, ru.ru_stime, kib / 1024)


def in_private_network(argv: list[str]) -> int | None:
    """Re-run this script under `unshare -n` with loopback up (Ray binds the machine's interface
    address otherwise; benchmarks/ray_scaling.py does the same); None when that is not possible."""
    if os.environ.get("AGL_BENCH_NETNS") or not shutil.which("unshare"):
        return None
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        return None
    cmd = " ".join(map(shlex.quote, [sys.executable, str(Path(__file__).resolve()), *argv]))
    return subprocess.run(["unshare", "-n", "sh", "-c", f"ip link set lo up && {cmd}"],
                          env={**os.environ, "AGL_BENCH_NETNS": "1"}).returncode


def machine() -> list[str]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [f"machine: {os.cpu_count()} CPU(s) (nproc {len(os.sched_getaffinity(0))}), {model}",
            f"load average (1, 5, 15 min): {load}"]


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False)))
    return "\n".join([f"## {title}", fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def env_for(work: Path) -> dict[str, str]:
    return {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONPATH": str(work / "src"),
            "AGL_NO_PROGRESS": "1"}


def edit_params(work: Path, edit) -> None:
    import yaml

    from agl.core import diskwrite

    path = work / "params.yaml"
    params = yaml.safe_load(path.read_text())
    edit(params)
    diskwrite.write_text(path, yaml.safe_dump(params, sort_keys=False, width=100))


# ---------------------------------------------------------------- the curation sample

def agl1k_durations() -> np.ndarray:
    import warnings

    from agl.dataset.manifest import load_manifest

    with warnings.catch_warnings():  # the published header's known defect, repaired
        warnings.simplefilter("ignore")
        return load_manifest(AGL1K_MANIFEST)["mp3seconds"].astype(float).to_numpy()


def stratified(durations: np.ndarray, k: int) -> list[float]:
    """The median clip of each of k equal-count strata of the sorted durations."""
    ordered = np.sort(durations)
    return [float(np.median(part)) for part in np.array_split(ordered, k)]


def _clip(i: int, seconds: float, speech: bool) -> tuple[dict, bytes]:
    import soundfile as sf
    from scipy.signal import resample_poly

    from agl.dataset import demo

    recipes = [r for r in demo.RECIPES if r.expected_filter_failure is None
               and ("speech" in r.foreground + r.background) == speech]
    recipe = recipes[i % len(recipes)]
    rng = np.random.default_rng(1444 + i)
    # the demo's own mix at its 16 kHz (its generators' rate), then AGL1K's 44.1 kHz stereo
    mono = demo._mix(recipe, rng, int(seconds * demo.SAMPLE_RATE))
    left = resample_poly(mono, 441, 160)
    right = np.roll(left, 17) * 0.9  # a stereo pair, not two copies of one channel
    pcm = np.round(np.clip(np.stack([left, right], axis=1), -1, 1) * 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, SAMPLE_RATE, format="MP3", compression_level=MP3_LEVEL, bitrate_mode="CONSTANT")
    key = f"scale_{i + 1:04d}"
    place = recipe.place
    row = {"key": key, "short_key": f"{i + 1:04d}", "longitude": place.longitude,
           "latitude": place.latitude, "altitude": place.altitude,
           "title": f"SYNTHETIC paper-scale clip {i + 1}", "description": "SYNTHETIC; not a recording",
           "mp3name": f"{key}.mp3", "mp3seconds": round(len(left) / SAMPLE_RATE, 3),
           "city": place.city, "country": place.country, "continent": place.continent,
           **demo._categories(recipe)}
    return row, buf.getvalue()


def write_sample(data: Path, seconds: list[float]) -> float:
    """A SYNTHETIC dataset in data/'s layout; returns the wall seconds it took to make."""
    import pandas as pd

    from agl.core import diskwrite
    from agl.dataset.checksums import Entry, write_lock
    from agl.dataset.manifest import COLUMNS, write_manifest

    t0 = time.perf_counter()
    # speech on the first round(share * n) strata, interleaved so both ends of the durations get some
    n_speech = round(SPEECH_SHARE * len(seconds))
    speech = [(i * n_speech) // len(seconds) != ((i + 1) * n_speech) // len(seconds)
              for i in range(len(seconds))]
    if len(seconds) <= 2:  # no pool to start for the quick mode's clips
        made = list(map(_clip, range(len(seconds)), seconds, speech))
    else:
        with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
            made = list(pool.map(_clip, range(len(seconds)), seconds, speech))
    shutil.rmtree(data, ignore_errors=True)
    entries = {}
    for row, mp3 in made:
        rel = f"{row['key']}/{row['mp3name']}"
        diskwrite.write_bytes(data / "audio" / rel, mp3)
        entries[rel] = Entry(size=len(mp3), sha256=__import__("hashlib").sha256(mp3).hexdigest())
    write_manifest(pd.DataFrame([r for r, _ in made], columns=list(COLUMNS)), data / "manifest.csv")
    write_lock(data / "lock.json", entries, source={"generator": "benchmarks/paper_scale.py (SYNTHETIC)"})
    return time.perf_counter() - t0


def mini_tree(work: Path, edit=None) -> Path:
    """What the curation stages need and nothing else: stages/, src/ (a link), params.yaml."""
    work.mkdir(parents=True)
    shutil.copytree(ROOT / "stages", work / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "src").symlink_to(ROOT / "src")
    shutil.copy2(ROOT / "params.yaml", work / "params.yaml")
    if edit:
        edit_params(work, edit)
    return work


def curation_stages(work: Path, quick: bool) -> list[tuple[str, str]]:
    """The curation stages' commands as dvc.yaml writes them (perturb's `foreach` expanded)."""
    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    params = yaml.safe_load((work / "params.yaml").read_text())
    out = [(name, stages[name]["cmd"]) for name in CURATION]
    out += [(f"perturb@{key}", stages["perturb"]["do"]["cmd"].replace("${key}", key)) for key in params["perturb"]]
    if quick:
        out = [(n, c) for n, c in out if n == "filter"]
    return out


def _curation_params(quick: bool):
    def edit(p):
        p["counterfactual"]["subset"]["size"] = None  # every clip perturbed, as a lab at scale would
        for section in ("filter", "tag", "birds", "speech", "counterfactual"):
            if "jobs" in p[section]:  # the host's cores (the quick mode's two clips: no pool to start)
                p[section]["jobs"] = 1 if quick else os.cpu_count() or 1
    return edit


def curation(scratch: Path, sample_clips: int, quick: bool) -> tuple[list[list[str]], list[str], tuple]:
    durations = agl1k_durations()
    hours_agl1k = float(durations.sum()) / 3600
    seconds = [3.0, 3.0] if quick else stratified(durations, sample_clips)

    runs, made = {}, {}
    for label, secs in (("fixed", [5.0]), ("sample", seconds)):
        work = mini_tree(scratch / f"curation-{label}", _curation_params(quick))
        made[label] = write_sample(work / "data", secs)
        runs[label] = {name: measured(cmd, work, env_for(work)) for name, cmd in curation_stages(work, quick)}
    hours = sum(seconds) / 3600
    notes = [f"AGL1K: {len(durations)} clips, {hours_agl1k:.2f} h of audio (median {np.median(durations):.0f} s)",
             f"sample: {len(seconds)} SYNTHETIC clips, {hours * 60:.1f} min of audio "
             f"({', '.join(f'{s:.0f}' for s in seconds)} s), made in {made['sample']:.1f} s; "
             "fixed: each stage on one 5 s clip; per audio hour: (sample - fixed) / sample hours",
             f"AGL1K h = (fixed + per audio hour x {hours_agl1k:.1f} h) / 3600, wall on this host and user CPU"]
    rows = []
    total = total_cpu = 0.0
    for name, _ in curation_stages(scratch / "curation-sample", False):
        s, f = runs["sample"].get(name), runs["fixed"].get(name)
        if s is None:
            rows.append([name, NOT_RUN, *["-"] * (len(CURATION_HEADER) - 2)])
            continue
        rate = max(s.wall - f.wall, 0.0) / hours  # wall seconds per audio hour past the fixed cost
        cpu_rate = max(s.user - f.user, 0.0) / hours
        projected = (f.wall + rate * hours_agl1k) / 3600
        projected_cpu = (f.user + cpu_rate * hours_agl1k) / 3600
        total, total_cpu = total + projected, total_cpu + projected_cpu
        rows.append([name, f"{s.wall:.1f}", f"{s.user:.1f}", f"{f.wall:.1f}", f"{rate:.0f}", f"{cpu_rate:.0f}",
                     f"{3600 / rate:.0f}x" if rate else "-", f"{s.rss_mb:.0f}",
                     f"{projected:.2f}", f"{projected_cpu:.2f}"])
    rows.append(["all curation stages", *[""] * (len(CURATION_HEADER) - 3), f"{total:.2f}", f"{total_cpu:.2f}"])
    return rows, notes, (total, total_cpu)


CURATION_HEADER = ["stage", "sample wall s", "sample user s", "fixed wall s", "wall s / audio h",
                   "user s / audio h", "x real time", "peak RSS MB", "AGL1K h", "AGL1K CPU h"]


# ---------------------------------------------------------------- curation on a local Ray cluster

RAY_STAGES = ("speech", "perturb@mask_speech")  # a model actor per node; the dominant stage


def _subset(src: Path, dst: Path, n: int) -> float:
    """The middle n clips of the curation sample (its audio linked), for the Ray runs; their hours."""
    from agl.dataset.manifest import load_manifest, write_manifest

    frame = load_manifest(src / "manifest.csv")
    start = max((len(frame) - n) // 2, 0)
    frame = frame.iloc[start:start + n]
    (dst).mkdir(parents=True)
    (dst / "audio").symlink_to(src / "audio")
    shutil.copy2(src / "lock.json", dst / "lock.json")
    write_manifest(frame, dst / "manifest.csv")
    return float(frame["mp3seconds"].astype(float).sum()) / 3600


def ray_part(scratch: Path, nodes: tuple[int, ...], clips: int) -> tuple[list[list[str]], list[str]]:
    """speech and perturb@mask_speech through `executor.kind: ray` (AGL_EXECUTOR, as a cluster job
    sets it) on a ray.cluster_utils.Cluster of 1, 2, 4 one-CPU worker nodes (the head runs no
    work), against the same stages local; outputs compared byte for byte with the local run's."""
    import ray
    from ray.cluster_utils import Cluster

    def edit(p):
        _curation_params(False)(p)
        p["speech"]["heard_cache"] = None  # every run listens: the cache would answer the second one
    work = mini_tree(scratch / "ray", edit)
    hours = _subset(scratch / "curation-sample" / "data", work / "data", clips)
    stages = dict(curation_stages(work, False))
    env = env_for(work)
    measured(stages["filter"], work, env)  # speech reads the filter's table
    outputs = {"speech": ["build/curation/speech.csv"], "perturb@mask_speech": ["build/perturb/mask_speech.json"]}

    def run(name: str, env: dict[str, str]) -> tuple[Measure, dict[str, bytes]]:
        shutil.rmtree(work / "build" / "perturb", ignore_errors=True)
        m = measured(stages[name], work, env)
        return m, {p: (work / p).read_bytes() for p in outputs[name]}

    local = {name: run(name, env) for name in RAY_STAGES}
    rows = [[name, "local", f"{local[name][0].wall:.1f}", f"{local[name][0].user:.1f}", "1.00",
             f"{3600 * hours / local[name][0].wall:.0f}x", "yes"] for name in RAY_STAGES]
    cores = os.cpu_count() or 1
    efficiency: dict[int, float] = {}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        ray_env = {**env, "AGL_EXECUTOR": "ray", "AGL_RAY_ADDRESS": cluster.address}
        have = 0
        for n in nodes:
            while have < n:
                cluster.add_node(num_cpus=1)
                have += 1
            cluster.wait_for_nodes()
            # one actor per worker node: `actors: null` counts the head too, whose 0 CPUs can
            # never hold one, and the stage would wait for it
            edit_params(work, lambda p, n=n: p["executor"]["ray"].update(actors=n))
            for name in RAY_STAGES:
                m, out = run(name, ray_env)
                same = "yes" if out == local[name][1] else "NO"
                rows.append([name, f"ray, {n} node{'s' * (n > 1)}", f"{m.wall:.1f}", f"{m.user:.1f}",
                             f"{local[name][0].wall / m.wall:.2f}", f"{3600 * hours / m.wall:.0f}x", same])
                # the share of the busy CPUs spent on the work the local run's user CPU measures
                e = local[name][0].user / (min(n, cores) * m.wall)
                efficiency[n] = min(efficiency.get(n, e), e)
    finally:
        ray.shutdown()
        cluster.shutdown()
    notes = [f"Ray: the middle {clips} clips of the sample ({hours * 60:.1f} min of audio); each worker node 1 CPU, "
             f"all on this host's {cores} cores with the driver; user s: the stage's driver process only;",
             "efficiency at n nodes: local user CPU / (min(n, cores) x Ray wall), the worst stage: "
             + ", ".join(f"{n}: {e:.2f}" for n, e in sorted(efficiency.items()))]
    return rows, notes, efficiency


def projection(hours: tuple[float, float] | None, efficiency: dict[int, float]) -> list[list[str]]:
    """AGL1K's curation on N one-CPU Ray workers: its CPU hours (user CPU, measured here) over N,
    at the efficiency measured on two nodes (two workers on this host's two cores: the CPU
    seconds the local run needed over the CPU seconds two busy nodes held)."""
    if hours is None:
        return [[label, NOT_RUN, "-", "-"] for label in PROJECTED]
    wall, cpu = hours
    e2 = efficiency.get(2)
    rows = [[PROJECTED[0], f"{wall:.2f}", f"{cpu:.2f}", "-"]]
    for n, label in zip(WORKERS, PROJECTED[1:], strict=True):
        rows.append([label, "-", f"{cpu / n:.2f}", f"{cpu / (n * e2):.2f}" if e2 else "not measured"])
    return rows


WORKERS = (1, 2, 4, 8, 16, 32)
PROJECTED = ("this host, local", *(f"{n} Ray worker{'s' * (n > 1)} (1 CPU each)" for n in WORKERS))


PROJECTION_HEADER = ["AGL1K curation on", "wall h here", "ideal h (CPU h / N)", "at measured 2-node efficiency"]
RAY_HEADER = ["stage", "where", "wall s", "driver user s", "speed-up vs local", "x real time", "bytes as local"]


# ---------------------------------------------------------------- DVC at 1, 4 and 16 models

OFFLINE = {
    "knn": {"backend": "knn", "model": "logmel-stats", "settings": {"k": 1, "max_seconds": 30, "leave_out": "site:25"}},
    "random": {"backend": "random", "model": "uniform-latlon", "settings": {"seed": 0}},
    "random-sphere": {"backend": "random-sphere", "model": "uniform-sphere", "settings": {"seed": 0}},
    "prior": {"backend": "prior", "model": "top-country-centroid"},
    "langprior": {"backend": "langprior", "model": "pypi-whisper-base", "settings": {"point": "centroid"}},
}


def roster(url: str) -> list[tuple[str, dict]]:
    """16 model entries: knn first (the reference run and the counterfactual default), offline
    baselines and fake servers interleaved, so 4 models hold both kinds."""
    fakes = [(f"fake-{i:02d}", {"backend": "openai-compatible", "model": f"fake-audio-{i:02d}",
                                "settings": {"base_url": url + "/v1", "temperature": 0}})
             for i in range(1, 12)]
    offline = list(OFFLINE.items())
    order = [offline[0], fakes[0], offline[1], fakes[1], *offline[2:], *fakes[2:]]
    return order[:16]


# `dvc repro` in a child: DVC's own CPU apart from its stages', and the stage commands' wall
# timed inside DVC (dvc.stage.run.cmd_run runs each one), so DVC's wall is the rest.
_REPRO = """
import json, resource, sys, time
import dvc.stage.run as run
walls = []
inner = run.cmd_run
def timed(stage, *a, **k):
    t0 = time.perf_counter()
    try:
        return inner(stage, *a, **k)
    finally:
        walls.append(time.perf_counter() - t0)
run.cmd_run = timed
from dvc.cli import main
t0 = time.perf_counter()
rc = main(["repro", "-q"])
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"wall": wall, "stages": len(walls), "stage_wall": sum(walls),
           "dvc_cpu": me.ru_utime + me.ru_stime, "stage_user": kids.ru_utime}, open(sys.argv[1], "w"))
sys.exit(rc)
"""


def _stage_count(work: Path) -> int:
    return len(_stages_in_order(work))


def dvc_part(scratch: Path, latency: float, sizes: tuple[int, ...]) -> tuple[list, list, list[str]]:
    import multiprocessing as mp

    from inference_concurrency import serve  # the same fake endpoint (tests/fake_llm.py)

    queue = mp.Queue()
    server = mp.Process(target=serve, args=(latency, queue), daemon=True)
    server.start()
    url = queue.get(timeout=60)
    rows, exp_rows = [], []
    work = scratch / "dvc"
    work.mkdir(parents=True)
    _copy_tree(work)
    env = env_for(work)
    try:
        measured(["agl", "download"], work, env)
        for n in sizes:  # one workspace, models added as a lab adds them: only new stages run
            models = dict(roster(url)[:n])

            def edit(p, models=models):
                p["models"] = models
                p["counterfactual"]["models"] = ["knn"]  # the default matrix: knn x the default interventions
                p["infer"]["concurrency"] = 16  # 16 requests in flight per model, as a lab would set
            edit_params(work, edit)
            stages = _stage_count(work)
            report = work / ".repro.json"
            total = measured([sys.executable, "-c", _REPRO, str(report)], work, env)
            r = json.loads(report.read_text())
            ran = max(r["stages"], 1)
            dvc_wall = r["wall"] - r["stage_wall"]
            noop = measured(["dvc", "repro", "-q"], work, env)
            status = measured(["dvc", "status", "-q"], work, env)
            rows.append([str(n), str(stages), str(r["stages"]), f"{total.wall:.0f}", f"{r['stage_wall']:.0f}",
                         f"{r['stage_user']:.0f}", f"{dvc_wall:.1f}", f"{r['dvc_cpu']:.1f}",
                         f"{dvc_wall / ran:.2f}", f"{r['dvc_cpu'] / ran:.2f}",
                         f"{noop.wall:.1f}", f"{noop.user + noop.sys:.1f}", f"{1000 * noop.wall / stages:.0f}",
                         f"{status.wall:.1f}"])
            if n == max(sizes):
                exp_rows = exp_part(work, env)
    finally:
        server.terminate()
    notes = ["one workspace: each row adds models to the one above (a fresh repro of the 16 runs every stage once);",
             f"fake servers answer in {latency:.1f} s; infer.concurrency 16; the default interventions, knn listens;",
             "commands: the stage commands' wall inside DVC; DVC: the rest of the repro, and DVC's own CPU"]
    return rows, exp_rows, notes


DVC_HEADER = ["models", "stages", "ran", "repro wall s", "commands wall s", "commands user s",
              "DVC wall s", "DVC CPU s", "DVC wall s/ran", "DVC CPU s/ran", "no-op repro s",
              "no-op CPU s", "no-op ms/stage", "status s"]


def _output(cmd: list[str], work: Path, env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed: {' '.join(cmd)}: {(done.stderr.strip().splitlines() or [''])[-1]}")
    return time.perf_counter() - t0, done.stdout


def exp_part(work: Path, env: dict[str, str]) -> list[list[str]]:
    """`dvc exp show` and `agl exp` on the 16-model workspace (committed, so a baseline exists)."""
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "add", "-A"], cwd=work, check=True, capture_output=True)
    subprocess.run([*git, "commit", "-qm", "16 models"], cwd=work, check=True, capture_output=True)
    rows = []
    for label, cmd in EXP_COMMANDS.items():
        wall, out = _output(cmd, work, {**env, "COLUMNS": "200"})
        lines = out.splitlines()
        cols = len(lines[0].split(",")) if label.endswith("--csv") and lines else None
        rows.append([label, f"{wall:.1f}", str(len(lines)), str(max(map(len, lines), default=0)),
                     str(cols) if cols else "-"])
    return rows


EXP_COMMANDS = {"dvc exp show": ["dvc", "exp", "show", "--no-pager"],
                "dvc exp show --csv": ["dvc", "exp", "show", "--csv"],
                "agl exp": ["agl", "exp"], "agl exp --wide": ["agl", "exp", "--wide"]}
EXP_HEADER = ["command", "wall s", "lines", "widest line (chars)", "CSV columns"]


# ---------------------------------------------------------------- scoring at 16 x 1,444

def synthetic_runs(work: Path, runs: int, seed: int = 0) -> list[str]:
    """AGL1K's manifest as data/manifest.csv and `runs` runs of SYNTHETIC predictions."""
    import warnings

    from agl.dataset.manifest import load_manifest, write_manifest
    from agl.predictions.records import Prediction, Status, write_predictions

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = load_manifest(AGL1K_MANIFEST)
    write_manifest(frame, work / "data" / "manifest.csv")
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(0, 1, len(frame))
    names = []
    for r in range(runs):
        name = f"run{r:02d}"
        skill = 0.3 + 0.6 * r / max(runs - 1, 1)
        preds = []
        for d, row in zip(difficulty, frame.itertuples(index=False), strict=True):
            u = rng.random()
            right = rng.random() < skill * (1 - d) ** 2
            spread = 0.3 if right else 40.0
            if u < 0.02:
                preds.append(Prediction(row.key, Status.FAILED, error="timeout"))
            elif u < 0.12:
                preds.append(Prediction(row.key, Status.REFUSED, refused=True, reasoning="cannot tell"))
            else:
                lat = float(np.clip(row.latitude + rng.normal(0, spread), -89, 89))
                lon = float((row.longitude + rng.normal(0, spread * 2) + 180) % 360 - 180)
                preds.append(Prediction(row.key, Status.OK, latitude=round(lat, 4), longitude=round(lon, 4),
                                        city=row.city, country=row.country if right else "Elsewhere",
                                        continent=row.continent, reasoning="synthetic reasoning " * 20))
        write_predictions(work / "build" / "runs" / name / "predictions.jsonl", preds)
        names.append(name)
    return names


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def scoring(scratch: Path, runs: int, metric_bootstrap: int) -> tuple[list[list[str]], list[str]]:
    work = scratch / "scoring"
    work.mkdir(parents=True)
    _copy_tree(work)
    env = env_for(work)
    names = synthetic_runs(work, runs)
    def edit(p):
        p["models"] = {n: {"backend": "random", "model": f"synthetic-{n}"} for n in names}
        p["evaluate"]["metric_bootstrap"] = metric_bootstrap
    edit_params(work, edit)
    steps: list[tuple[str, list[list[str]], Path]] = [
        ("evaluate (each run)", [[sys.executable, "stages/evaluate.py", n, f"build/runs/{n}/predictions.jsonl",
                                  "data/manifest.csv", f"build/runs/{n}", f"metrics/runs/{n}.json"]
                                 for n in names], work / "build" / "runs"),
        ("judge (all runs; report.judge null)",
         [[sys.executable, "stages/judge.py", "build/runs", "build/judges"]], work / "build" / "judges"),
        ("paper (no published runs)", [[sys.executable, "stages/paper.py", "build/paper"]], work / "build" / "paper"),
        ("leaderboard", [[sys.executable, "stages/leaderboard.py", "build", "--runs", "build/runs",
                          "--paper", "build/paper", "--imported", "imported"]], work / "build" / "leaderboard.html"),
        ("report", [[sys.executable, "stages/report.py", "--judges", "build/judges", "build/report",
                     "build/leaderboard.csv", "data/manifest.csv", "build/runs", "build/paper"]],
         work / "build" / "report" / "report.html"),
        ("explorer export", [["agl", "explore", "--export", "build/explore", "--birds", "none", "--speech", "none",
                              "--perturb", "none", "--listen", "none"]], work / "build" / "explore"),
    ]
    rows = []
    jobs = os.cpu_count() or 1
    for label, cmds, out in steps:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=jobs) as pool:  # one per core: the per-run stages are independent
            ms = list(pool.map(lambda c: measured(c, work, env), cmds))
        wall = time.perf_counter() - t0
        rows.append([label, str(len(ms)), f"{wall:.1f}", f"{sum(m.wall for m in ms):.1f}",
                     f"{sum(m.user for m in ms):.1f}", f"{max(m.rss_mb for m in ms):.0f}", f"{_size(out) / 1e6:.1f}"])
    notes = [f"SYNTHETIC predictions on AGL1K's manifest; evaluate.metric_bootstrap {metric_bootstrap} "
             "(params.yaml: 10000); the per-run stages run one per core, the others alone"]
    return rows, notes


SCORING_HEADER = ["step", "processes", "wall s", "process wall s", "user s", "peak RSS MB", "output MB"]


GROUPS = (("curation", "ray"), ("dvc",), ("scoring",))  # what --jobs runs side by side (ray reads curation's sample)


def side_by_side(args: argparse.Namespace, parts: set[str], scratch: Path) -> int:
    """--jobs N: the part groups as concurrent children of this script, their tables printed in
    order. For a machine shared under load: each part's CPU stays its own, its wall carries the
    others' (say so when quoting it)."""
    argv = sys.argv[1:]
    passed = [a for i, a in enumerate(argv) if a != "--keep" and not (i and argv[i - 1] == "--keep")
              and not a.startswith("--keep=")]  # each group keeps its own folder under ours
    groups = [[p for p in g if p in parts] for g in GROUPS]
    procs = []
    for group in filter(None, groups):
        cmd = [sys.executable, str(Path(__file__).resolve()), *passed, "--jobs", "1",
               "--only", ",".join(group), "--keep", str(scratch / "-".join(group))]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        time.sleep(1)
    rc = 0
    for proc in procs:
        out, _ = proc.communicate()
        print(out, end="", flush=True)
        rc = rc or proc.returncode
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two 3 s clips, the filter alone; no dvc, no scoring")
    ap.add_argument("--sample-clips", type=int, default=6, help="strata of AGL1K's durations, one clip each")
    ap.add_argument("--latency", type=float, default=2.0, help="seconds a fake server takes to answer")
    ap.add_argument("--models", default="1,4,16", help="model counts of the dvc part")
    ap.add_argument("--metric-bootstrap", type=int, default=1000,
                    help="evaluate's resamples in the scoring part (params.yaml: 10000)")
    ap.add_argument("--runs", type=int, default=16, help="runs of the scoring part")
    ap.add_argument("--only", default="curation,ray,dvc,scoring", help="parts to run, comma-separated")
    ap.add_argument("--nodes", default="1,2,4", help="Ray worker nodes of the ray part")
    ap.add_argument("--ray-clips", type=int, default=2, help="clips of the sample the ray part runs")
    ap.add_argument("--no-netns", action="store_true", help="do not re-run in a private network namespace")
    ap.add_argument("--keep", type=Path, help="work here and keep the folder")
    ap.add_argument("--jobs", type=int, default=1,
                    help="run curation+ray, dvc and scoring side by side (their CPU figures stay their own)")
    args = ap.parse_args()
    if not AGL1K_MANIFEST.is_file():
        sys.exit(f"{AGL1K_MANIFEST}: missing; the benchmark reads AGL1K's manifest from ../shared (agl shared)")
    parts = set(args.only.split(","))
    show = parts if not args.quick else {"curation", "ray", "dvc", "scoring"}  # quick: every table
    if args.jobs > 1 and not args.quick:
        scratch = args.keep or Path(tempfile.mkdtemp(prefix="agl-paper-scale-"))
        t0 = time.perf_counter()
        try:
            rc = side_by_side(args, parts, scratch)
        finally:
            if not args.keep:
                shutil.rmtree(scratch, ignore_errors=True)
        print(f"\nall parts: {time.perf_counter() - t0:.0f} s wall, side by side ({args.jobs} jobs)")
        return rc
    if "ray" in parts and not args.quick and not args.no_netns:
        rc = in_private_network(sys.argv[1:])  # Ray binds the interface address: loopback only
        if rc is not None:
            return rc
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="agl-paper-scale-"))
    scratch.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print("\n".join(machine()), flush=True)
    try:
        hours, efficiency = None, {}
        if "curation" in parts or "ray" in parts:
            rows, notes, hours = curation(scratch, args.sample_clips, args.quick)
            print("\n" + table("curation: per stage, on this host", CURATION_HEADER, rows) + "\n")
            print("\n".join(notes), flush=True)
        if "ray" in parts and not args.quick:
            rows, notes, efficiency = ray_part(scratch, tuple(map(int, args.nodes.split(","))), args.ray_clips)
        else:
            rows, notes = [[s, NOT_RUN, *["-"] * (len(RAY_HEADER) - 2)] for s in RAY_STAGES], []
        if "ray" in show:
            print("\n" + table("curation on a local Ray cluster", RAY_HEADER, rows))
            if notes:
                print("\n" + "\n".join(notes))
        if show & {"curation", "ray"}:
            print("\n" + table("AGL1K curation projected (hours)", PROJECTION_HEADER, projection(hours, efficiency)),
                  flush=True)
        if "dvc" in parts and not args.quick:
            dvc_rows, exp_rows, notes = dvc_part(scratch, args.latency, tuple(map(int, args.models.split(","))))
        else:
            dvc_rows = [[str(n), NOT_RUN, *["-"] * (len(DVC_HEADER) - 2)] for n in MODELS_AT]
            exp_rows = [[c, NOT_RUN, "-", "-", "-"] for c in EXP_COMMANDS]
            notes = []
        if "dvc" in show:
            print("\n" + table("dvc repro on the demo set: 1, 4 and 16 models", DVC_HEADER, dvc_rows))
            if notes:
                print("\n" + "\n".join(notes))
            print("\n" + table("experiments table at 16 models", EXP_HEADER, exp_rows), flush=True)
        notes = []
        if "scoring" in parts and not args.quick:
            rows, notes = scoring(scratch, args.runs, args.metric_bootstrap)
        else:
            rows = [[s, NOT_RUN, *["-"] * (len(SCORING_HEADER) - 2)] for s in
                    ("evaluate (each run)", "judge (each run; report.judge null)", "paper (no published runs)",
                     "leaderboard", "report", "explorer export")]
        if "scoring" in show:
            print("\n" + table(f"scoring: {args.runs} runs x {AGL1K_CLIPS} clips", SCORING_HEADER, rows))
            if notes:
                print("\n" + "\n".join(notes))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\ntotal: {time.perf_counter() - t0:.0f} s wall, children's user CPU {kids.ru_utime:.0f} s")
    print(machine()[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
