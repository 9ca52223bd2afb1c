"""Download throughput of `agl.dataset.download` at --jobs 1 and --jobs 8 from a local server.

A local HTTP server (127.0.0.1, threaded, keep-alive) serves N files of S MB each in the
Archive's layout, answering every request only after a fixed latency (default 20 ms) to stand
in for the round trip and queueing of a real server; without it a loopback server answers in
microseconds and parallelism would measure nothing but local copying. Each run downloads
everything into a fresh folder through the real code path (resumable .part files, SHA-256,
lock file; Archive metadata off), then the script prints files/s, MB/s and the speed-up.

    python benchmarks/download_throughput.py            # 200 files x 2 MB, jobs 1 and 8
    python benchmarks/download_throughput.py --latency-ms 0 --files 50
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from agl.dataset.download import download_clips  # noqa: E402
from agl.dataset.fetch import Policy  # noqa: E402
from agl.dataset.manifest import Clip  # noqa: E402


def serve(size: int, latency_s: float) -> ThreadingHTTPServer:
    payload = os.urandom(size)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            time.sleep(latency_s)  # the simulated round trip (server side, so it overlaps)
            index = int(self.path.rsplit("_", 1)[-1].split(".")[0])
            body = index.to_bytes(8, "big") + payload[8:]  # every file distinct
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run(files: int, jobs: int, base_url: str) -> float:
    clips = [Clip(f"bench_{i}", f"clip_{i}.mp3", 0.0, 0.0, 1.0, "", "", "") for i in range(files)]
    # random bytes, not audio: no duration check
    policy = Policy(base_url=base_url, metadata_url=None, jobs=jobs, progress=False,
                    duration_tolerance=None)
    with tempfile.TemporaryDirectory(prefix="agl-bench-") as out:
        start = time.perf_counter()
        summary = download_clips(clips, out, policy)
        elapsed = time.perf_counter() - start
    assert summary.count("downloaded") == files, summary.line()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--size-mb", type=float, default=2.0)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    size = int(args.size_mb * 1_000_000)
    server = serve(size, args.latency_ms / 1000)
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"{args.files} files x {args.size_mb:g} MB from {base_url}, "
          f"{args.latency_ms:g} ms server latency per request, {os.cpu_count()} CPU(s)")
    times = {}
    for jobs in args.jobs:
        times[jobs] = run(args.files, jobs, base_url)
        mb = args.files * size / 1e6
        print(f"--jobs {jobs:>2}: {times[jobs]:6.2f} s  {args.files / times[jobs]:7.1f} files/s  "
              f"{mb / times[jobs]:7.1f} MB/s")
    if len(times) > 1:
        first, last = args.jobs[0], args.jobs[-1]
        print(f"speed-up --jobs {last} vs --jobs {first}: {times[first] / times[last]:.2f}x")
    server.shutdown()


if __name__ == "__main__":
    main()
