"""`agl play` under many simultaneous clients (issue 24, "the listening game").

Starts the real `agl play` (a subprocess, on the 32-clip synthetic demo set, port 0) and lets
N clients (default 200) loose at the same instant, each on its own connection:

    GET /api/state  ->  GET /audio/<clip> (first 64 KiB, as a player's first range)
                    ->  POST /api/guess for the clip it was shown

Many clients are shown the same clip, so most guesses race for it: exactly one is recorded,
the others get 409. Prints p50/p95/max latency per request and per client, the status counts,
and checks the run folder: no clip recorded twice, one record per 200 answer. Exits 1 on any
5xx, transport error or double record.

    python benchmarks/play_load.py [--clients 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path


def start_game(workdir: Path) -> tuple[subprocess.Popen, int]:
    from agl.dataset.demo import write_demo

    write_demo(workdir / "demo")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agl.cli", "play", "--manifest", str(workdir / "demo/manifest.csv"),
         "--player", "load", "--out", str(workdir / "run"), "--port", "0", "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not match:
        proc.kill()
        sys.exit(f"agl play did not start: {line!r} {proc.stderr.read()}")
    return proc, int(match.group(1))


def client(port: int, barrier: threading.Barrier, out: list, timeout: float) -> None:
    timings: list[tuple[str, int | str, float]] = []
    t_client = None
    try:
        barrier.wait()
        t_client = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

        def call(name, method, path, body=None, headers=None):
            t0 = time.perf_counter()
            try:
                conn.request(method, path, body=body, headers=headers or {})
                resp = conn.getresponse()
                data = resp.read()
                status: int | str = resp.status
            except (OSError, http.client.HTTPException) as exc:
                data, status = b"", type(exc).__name__
            timings.append((name, status, time.perf_counter() - t0))
            return status, data

        status, data = call("state", "GET", "/api/state")
        if status == 200:
            current = json.loads(data)["current"]
            if current is not None:
                call("audio", "GET", current["audio_url"], headers={"Range": "bytes=0-65535"})
                guess = {"clip_id": current["clip_id"], "latitude": 48.85, "longitude": 2.35,
                         "city": "Paris", "country": "France", "continent": "Europe"}
                call("guess", "POST", "/api/guess", json.dumps(guess).encode(),
                     {"Content-Type": "application/json"})
        conn.close()
    finally:
        total = time.perf_counter() - t_client if t_client is not None else float("nan")
        out.append((timings, total))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="waves of --clients, one after another")
    ap.add_argument("--timeout", type=float, default=60.0, help="client socket timeout (s)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_game(Path(tmp))
        results: list = []
        try:
            for _ in range(args.rounds):
                barrier = threading.Barrier(args.clients)
                threads = [threading.Thread(target=client,
                                            args=(port, barrier, results, args.timeout))
                           for _ in range(args.clients)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        stderr = proc.stderr.read()
        lines = (Path(tmp) / "run/predictions.jsonl").read_text().splitlines()
        recorded = Counter(json.loads(line)["sample_id"] for line in lines)

    requests = [t for timings, _ in results for t in timings]
    latencies = [s for _, _, s in requests]
    client_totals = [total for _, total in results]
    statuses = Counter(f"{name} {status}" for name, status, _ in requests)
    errors = sum(n for key, n in statuses.items()
                 if not key.split()[1].isdigit() or key.split()[1].startswith("5"))
    guesses_ok = statuses.get("guess 200", 0)
    twice = sorted(k for k, n in recorded.items() if n > 1)

    print(f"agl play, {args.clients} simultaneous clients x {args.rounds} rounds "
          f"({len(requests)} requests)")
    print(f"  per request: p50 {pct(latencies, .5):.3f} s  p95 {pct(latencies, .95):.3f} s  "
          f"max {max(latencies):.3f} s")
    print(f"  per client (3 requests): p50 {pct(client_totals, .5):.3f} s  "
          f"p95 {pct(client_totals, .95):.3f} s  max {max(client_totals):.3f} s")
    print("  statuses: " + ", ".join(f"{k}: {n}" for k, n in sorted(statuses.items())))
    print(f"  errors (5xx or no answer): {errors}")
    print(f"  recorded: {len(lines)} lines, {len(recorded)} clips, "
          f"{guesses_ok} guesses answered 200; recorded twice: {len(twice)}")
    if stderr.strip():
        print("  server stderr: " + stderr.strip().replace("\n", " | ")[:500])
    ok = errors == 0 and not twice and guesses_ok == len(lines) and "Traceback" not in stderr
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
