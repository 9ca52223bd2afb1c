"""Throughput of one model served by several replicas (`base_url` a list, agl.backends.endpoints).

Three fake OpenAI-compatible servers (each in its own process) answer after a fixed latency
(default 1 s); the runner drives them through the real openai SDK with concurrency 8 per
endpoint. Prints the single-endpoint throughput, the three-endpoint throughput, and their
ratio against the ideal 3x (the issue's floor: at least 0.9).

    python benchmarks/endpoint_pool.py [--per-endpoint-requests 48] [--latency 1.0] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inference_concurrency import make_clips, serve  # noqa: E402


def timed_run(clips, audio, out, urls, concurrency):
    from agl.backends.endpoints import pool_capacity
    from agl.contracts.models import ModelSpec
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.prompts import load_prompt

    settings = {"base_url": urls, "endpoint_concurrency": concurrency, "temperature": 0}
    from agl.backends.base import get_backend

    backend = get_backend("openai-compatible")("fake", **settings)
    t0 = time.perf_counter()
    s = run_inference(
        ModelSpec("run", "openai-compatible", "fake", settings=settings),
        load_prompt(),
        clips,
        out_dir=out,
        audio_root=audio,
        options=RunOptions(cache_dir=None, concurrency=pool_capacity(settings), timeout_s=60,
                           max_retries=0, progress=False),
        backend=backend,
    )
    wall = time.perf_counter() - t0
    if s["n_ok"] != len(clips):
        raise SystemExit(f"incomplete run: {s['n_ok']} of {len(clips)} ok")
    return wall, backend.endpoint_report()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-endpoint-requests", type=int, default=48)
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--endpoints", type=int, default=3)
    args = ap.parse_args()
    q = mp.Queue()
    procs = [mp.Process(target=serve, args=(args.latency, q), daemon=True) for _ in range(args.endpoints)]
    for p in procs:
        p.start()
    urls = [q.get(timeout=30) + "/v1" for _ in procs]
    n1 = args.per_endpoint_requests
    nk = n1 * args.endpoints
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            clips = make_clips(tmp / "audio", nk)
            timed_run(clips[:3], tmp / "audio", tmp / "warm", urls, 1)  # imports, connections
            w1, _ = timed_run(clips[:n1], tmp / "audio", tmp / "one", urls[:1], args.concurrency)
            wk, rep = timed_run(clips, tmp / "audio", tmp / "many", urls, args.concurrency)
    finally:
        for p in procs:
            p.terminate()
    r1, rk = n1 / w1, nk / wk
    print(f"fake replicas: latency {args.latency:g} s, concurrency {args.concurrency} per endpoint")
    print(
        f"1 endpoint : {n1:>4} requests in {w1:6.2f} s = {r1:6.2f} req/s (ideal {args.concurrency / args.latency:.2f})"
    )
    print(
        f"{args.endpoints} endpoints: {nk:>4} requests in {wk:6.2f} s = {rk:6.2f} req/s "
        f"(ideal {args.endpoints * args.concurrency / args.latency:.2f})"
    )
    print(f"ratio to {args.endpoints}x single-endpoint throughput: {rk / (args.endpoints * r1):.3f} (floor 0.9)")
    for e in rep:
        print(f"  {e['url']}: {e['requests']} requests, {e['failures']} failed, p50 {e['latency_s']['p50']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
