"""Throughput of the inference runner against a fake server with a fixed 200 ms latency.

Runs the real path end to end (the openai SDK over HTTP to 127.0.0.1, the runner's
semaphore, retries, parsing, and one fsync'd JSON Lines append per reply) for 1,444 clips
(the size of AGL1K) at concurrency 1, 8 and 32, and prints throughput against the ideal
`concurrency / 0.2 s`. Concurrency 1 runs a subset (default 50 requests, ideal 10 s) and
extrapolates the full run's time from its measured rate; say so when quoting it.

    python benchmarks/inference_concurrency.py [--n 1444] [--subset-c1 50] [--latency 0.2]

The fake server runs in its own process, so its threads do not share the client's GIL.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

REPLY = ('{"reasoning": "x", "city": "Berlin", "country": "Germany", "continent": "Europe",'
         ' "latitude": 52.5, "longitude": 13.4, "confidence": 0.5}')


def serve(latency: float, port_queue) -> None:
    from fake_llm import Answer, FakeServer, gemini_response, openai_completion

    def answer(call):
        body = gemini_response(REPLY) if "generateContent" in call.path else openai_completion(REPLY)
        return Answer(200, body, delay_s=latency)

    server = FakeServer(answer)
    server.__enter__()
    port_queue.put(server.url)
    while True:  # serve until the parent terminates this process
        time.sleep(3600)


def sdk_only(url: str, n: int, concurrency: int) -> float:
    """Seconds for n bare openai SDK calls (no runner) with the same body, for reference:
    the client's own CPU cost per request bounds any runner on the same machine."""
    import asyncio
    import base64

    from openai import AsyncOpenAI

    from agl.prompts import load_prompt

    async def go() -> float:
        client = AsyncOpenAI(base_url=url + "/v1", api_key="sk-benchmark", max_retries=0)
        sem = asyncio.Semaphore(concurrency)
        content = [{"type": "text", "text": load_prompt().text},
                   {"type": "input_audio", "input_audio": {
                       "data": base64.b64encode(bytes(364)).decode(), "format": "wav"}}]

        async def one() -> None:
            async with sem:
                await client.chat.completions.create(
                    model="fake", messages=[{"role": "user", "content": content}])

        await one()
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        wall = time.perf_counter() - t0
        await client.close()
        return wall

    return asyncio.run(go())


def make_clips(root: Path, n: int):
    import numpy as np
    import soundfile as sf

    from agl.dataset.manifest import Clip

    out = []
    for i in range(n):
        key = f"clip_{i:04d}"
        (root / key).mkdir(parents=True, exist_ok=True)
        sf.write(root / key / "a.wav", np.full(160, i / n, dtype=np.float32), 16000)
        out.append(Clip(key=key, mp3name="a.wav", latitude=0.0, longitude=0.0, seconds=0.01,
                        city="", country="", continent=""))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1444)
    ap.add_argument("--subset-c1", type=int, default=50)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--backend", choices=["openai", "gemini"], default="openai",
                    help="which real SDK talks to the fake server")
    args = ap.parse_args()

    from agl.contracts.models import ModelSpec
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.predictions.records import read_predictions
    from agl.prompts import load_prompt

    os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark-not-a-key")
    os.environ.setdefault("GEMINI_API_KEY", "gm-benchmark-not-a-key")
    q = mp.Queue()
    proc = mp.Process(target=serve, args=(args.latency, q), daemon=True)
    proc.start()
    url = q.get(timeout=30)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            clips = make_clips(tmp / "audio", args.n)
            if args.backend == "openai":
                settings = {"base_url": url + "/v1", "temperature": 0}
            else:
                settings = {"base_url": url, "api_version": "v1beta", "temperature": 0}
            # Warm-up (not timed): imports the SDK and opens a connection.
            spec = ModelSpec("run", args.backend, "fake", settings=settings)
            run_inference(spec, load_prompt(), clips[:3], out_dir=tmp / "warmup",
                          audio_root=tmp / "audio",
                          options=RunOptions(concurrency=1, timeout_s=30, max_retries=0,
                                             progress=False))
            for c in args.concurrency:
                n = min(args.subset_c1, args.n) if c == 1 else args.n
                out = tmp / f"run_c{c}"
                t0 = time.perf_counter()
                s = run_inference(spec, load_prompt(), clips[:n], out_dir=out,
                                  audio_root=tmp / "audio",
                                  options=RunOptions(cache_dir=None, concurrency=c, timeout_s=30,
                                                     max_retries=0, progress=False))
                wall = time.perf_counter() - t0
                if s["n_ok"] != n or len(read_predictions(out / "predictions.jsonl")) != n:
                    print({k: v for k, v in s.items() if k.startswith("n_")}, file=sys.stderr)
                    errs = {p.error for p in read_predictions(out / "predictions.jsonl").values()}
                    raise SystemExit(f"run at concurrency {c} incomplete: {sorted(map(str, errs))[:3]}")
                rate = n / wall
                ideal = c / args.latency
                rows.append((c, n, wall, rate, ideal, args.n / rate))
        if args.backend == "openai":
            c = max(args.concurrency)
            wall = sdk_only(url, args.n, c)
            sdk_row = (c, args.n, wall, args.n / wall, c / args.latency)
    finally:
        proc.terminate()
    print(f"fake server latency {args.latency * 1000:.0f} ms; {args.n} requests "
          f"({args.backend} SDK -> 127.0.0.1, parse, fsync'd append per reply)")
    print(f"{'conc':>4} {'requests':>8} {'wall s':>8} {'req/s':>8} {'ideal':>8} {'ratio':>6} "
          f"{'1444-run s':>10}")
    for c, n, wall, rate, ideal, full in rows:
        note = " (subset; full run extrapolated)" if n < args.n else ""
        print(f"{c:>4} {n:>8} {wall:>8.2f} {rate:>8.2f} {ideal:>8.2f} {rate / ideal:>6.3f} "
              f"{full:>10.1f}{note}")
    if args.backend == "openai":
        c, n, wall, rate, ideal = sdk_row
        print(f"reference, the bare SDK without the runner: {c:>4} {n:>8} {wall:>8.2f} "
              f"{rate:>8.2f} {ideal:>8.2f} {rate / ideal:>6.3f}")
    print(f"client CPU: {os.cpu_count()} core(s) on this machine (the fake server runs in "
          "another process on the same cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
