"""Filter-stage throughput: the two real AGL1K MP3s in ../shared, repeated to 30 minutes of
audio, measured as x real time (audio seconds per wall second) for

* decode alone (soundfile, float32), and
* decode + all four measures (the filter stage's per-clip work: `agl.curation.filtering.run_filter`),

each with one process and with two. Usage: python benchmarks/filter_throughput.py [--minutes 30]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO.parent / "shared" / "data" / "agl1k" / "archive"


def decode_seconds(path: Path) -> float:
    from agl.core.audio import decode

    data, sr = decode(path)
    return data.shape[0] / sr


def decode_all(paths: list[Path], jobs: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    if jobs == 1:
        audio = sum(map(decode_seconds, paths))
    else:
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            audio = sum(pool.map(decode_seconds, paths, chunksize=1))
    return audio, time.perf_counter() - t0


def filter_all(paths: list[Path], jobs: int) -> tuple[float, float]:
    from agl.curation.filtering import FilterConfig, run_filter

    run = run_filter([(f"clip{i}", p) for i, p in enumerate(paths)], FilterConfig(), jobs=jobs)
    if not all(r.passed for r in run.results):
        sys.exit("a real clip failed the filter; the benchmark measures passing clips")
    return sum(r.seconds or 0.0 for r in run.results), run.wall_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=30.0)
    args = ap.parse_args()
    mp3s = sorted(ARCHIVE.glob("*/*.mp3"))
    if len(mp3s) != 2:
        sys.exit(f"{ARCHIVE}: expected the two real AGL1K MP3s (../shared beside the checkout)")
    per_pass = sum(decode_seconds(p) for p in mp3s)  # also warms the page cache
    repeats = math.ceil(args.minutes * 60 / per_pass)
    paths = mp3s * repeats
    print(f"{len(paths)} files ({repeats} x the 2 real MP3s), "
          f"{per_pass * repeats / 60:.1f} min of audio; 44.1 kHz stereo MP3")
    for label, fn in (("decode only", decode_all), ("decode + 4 measures", filter_all)):
        for jobs in (1, 2):
            audio, wall = fn(paths, jobs)
            print(f"{label:>20}, {jobs} process(es): {wall:6.2f} s wall, "
                  f"{audio / wall:7.1f} x real time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
