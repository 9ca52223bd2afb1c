"""Throughput of the ray executor on 1, 2 and 4 nodes, against a fake endpoint with a fixed
200 ms latency, and its overhead against the local executor on one node.

Each node of a `ray.cluster_utils.Cluster` (a head that runs no shard, plus N worker nodes
with one CPU each) runs one shard at a time, and a shard has `--concurrency` requests in
flight: the per-node concurrency limit, so a node's ideal rate is concurrency / latency.
Weak scaling: `--per-node` clips per node (the run grows with the cluster), cut into two
shards per node; the ratio to one node should be at least 0.9 x N. The real path runs end
to end: the openai SDK over HTTP to 127.0.0.1 on every worker, replies posted to the
driver's collector, one fsync'd record per reply written by the driver alone.

    python benchmarks/ray_scaling.py [--per-node 240] [--concurrency 4] [--latency 0.2]

`AGL_BENCH_SHARDS=1` also prints each shard's node, start and seconds (where time went).

Ray binds and dials the machine's interface address; the script re-runs itself in a
private network namespace (`unshare -n`, loopback only) when it can (`--no-netns`: as is).
The fake server runs in its own process, so its threads do not share the driver's GIL.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inference_concurrency import make_clips, serve  # noqa: E402  (the same fake endpoint and clips)


def in_private_network(argv: list[str]) -> int | None:
    """Re-run this script under `unshare -n` with loopback up; None when that is not possible."""
    if os.environ.get("AGL_BENCH_NETNS") or not shutil.which("unshare"):
        return None
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    cmd = " ".join([sys.executable, *map(repr, [str(Path(__file__).resolve()), *argv])])
    return subprocess.run(["unshare", "-n", "sh", "-c", f"ip link set lo up && {cmd}"],
                          env={**os.environ, "AGL_BENCH_NETNS": "1"}).returncode


def timed_run(spec, clips, audio: Path, out: Path, options) -> tuple[float, dict]:
    from agl.inference.model_run import run_inference
    from agl.prompts import load_prompt

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    summary = run_inference(spec, load_prompt(), clips, out_dir=out, audio_root=audio, options=options)
    wall = time.perf_counter() - t0
    if summary["n_ok"] != len(clips):
        raise SystemExit(f"{out.name}: {summary['n_ok']} of {len(clips)} clips ok: the benchmark needs all")
    return wall, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-node", type=int, default=240, help="clips per node (weak scaling)")
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight per shard (per node)")
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--no-netns", action="store_true", help="do not re-run in a private network namespace")
    args = ap.parse_args()
    if not args.no_netns:
        rc = in_private_network(sys.argv[1:])
        if rc is not None:
            return rc
    if not os.environ.get("AGL_BENCH_NETNS"):
        print("note: not in a private network namespace: Ray binds this machine's interface address")

    import ray
    from ray.cluster_utils import Cluster

    from agl.contracts.models import ModelSpec
    from agl.executor.config import ExecutorConfig, RayConfig
    from agl.inference.runner import RunOptions

    q = mp.Queue()
    proc = mp.Process(target=serve, args=(args.latency, q), daemon=True)
    proc.start()
    url = q.get(timeout=30)
    spec = ModelSpec("bench", "openai-compatible", "fake", settings={"base_url": url + "/v1", "temperature": 0})
    rows, overhead = [], None
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            clips = make_clips(tmp / "audio", args.per_node * max(args.nodes))

            def options(transport=None) -> RunOptions:
                return RunOptions(cache_dir=None, concurrency=args.concurrency, timeout_s=30, max_retries=0,
                                  progress=False, transport=transport or ExecutorConfig())

            ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
            workers = 0
            for n in args.nodes:
                while workers < n:
                    cluster.add_node(num_cpus=1)
                    workers += 1
                cluster.wait_for_nodes()
                ray_opts = options(ExecutorConfig(kind="ray", ray=RayConfig(address=cluster.address, shards=2 * n)))
                subset = clips[: args.per_node * n]
                timed_run(spec, subset[: 4 * n], tmp / "audio", tmp / "warm", ray_opts)  # workers started
                wall, summary = timed_run(spec, subset, tmp / "audio", tmp / f"ray{n}", ray_opts)
                used = len(summary["ray"]["nodes"])
                if os.environ.get("AGL_BENCH_SHARDS"):  # each shard's node, start and seconds
                    t0 = min(r["started"] for r in summary["ray"]["shard_results"])
                    for r in summary["ray"]["shard_results"]:
                        print(f"  shard {r['shard']}: node {r['node'][:6]} +{r['started'] - t0:.2f} s, "
                              f"{r['seconds']:.2f} s, {r['asked']} clips", file=sys.stderr)
                rows.append((n, len(subset), wall, len(subset) / wall, n * args.concurrency / args.latency, used))
                if n == 1:
                    local, _ = timed_run(spec, subset, tmp / "audio", tmp / "local", options())
                    overhead = (local, wall)
    finally:
        ray.shutdown()
        cluster.shutdown()
        proc.terminate()
    base = rows[0][3]
    print(f"fake endpoint latency {args.latency * 1000:.0f} ms; per node: one shard at a time, "
          f"{args.concurrency} requests in flight (ideal {args.concurrency / args.latency:.1f} req/s); "
          f"{args.per_node} clips per node, 2 shards per node")
    print(f"{'nodes':>5} {'clips':>6} {'wall s':>7} {'req/s':>7} {'ideal':>7} {'vs ideal':>8} "
          f"{'vs 1 node':>9} {'>= 0.9N':>7} {'nodes used':>10}")
    for n, clips_n, wall, rate, ideal, used in rows:
        ratio = rate / base
        print(f"{n:>5} {clips_n:>6} {wall:>7.2f} {rate:>7.2f} {ideal:>7.2f} {rate / ideal:>8.3f} "
              f"{ratio:>9.3f} {'yes' if ratio >= 0.9 * n else 'NO':>7} {used:>10}")
    if overhead is not None:
        local, ray_wall = overhead
        print(f"one node, {args.per_node} clips: executor local {local:.2f} s, executor ray {ray_wall:.2f} s; "
              f"ray's overhead {ray_wall - local:+.2f} s ({(ray_wall / local - 1) * 100:+.1f} %)")
    print(f"machine: {os.cpu_count()} core(s) shared by every node, the driver and the fake server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
