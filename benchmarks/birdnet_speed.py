"""BirdNET's speed on the two real AGL1K clips in ../shared, and birdrange's latency.

Prints, for the acoustic model (agl.birds.birdnet): decode + resample to 48 kHz, and inference
alone, as x real time (audio seconds per wall second) for each thread count and batch size;
for birdrange: the occurrence grid's cold build (or warm load from the cache) and the
per-clip inversion latency with a warm cache (median and p95 over repeats).

Usage: python benchmarks/birdnet_speed.py [--threads 1 2] [--batch 8 16 32] [--repeats 200]
       [--resolution 1.0] [--cache cache/birdrange]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO.parent / "shared" / "data" / "agl1k" / "archive"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--resolution", type=float, default=1.0)
    ap.add_argument("--cache", type=Path, default=REPO / "cache" / "birdrange")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from agl.birds.birdnet import Acoustic, BirdConfig, decode_48k, detect, windows
    from agl.birds.range_model import YEAR_ROUND, invert, load_or_build

    clips = sorted(ARCHIVE.glob("*/*.mp3"))
    if not clips:
        sys.exit(f"no clips under {ARCHIVE}: ../shared must sit beside the checkout")
    t0 = time.perf_counter()
    audio = {p.parent.name: decode_48k(p) for p in clips}
    decode_s = time.perf_counter() - t0
    total = sum(len(x) for x in audio.values()) / 48_000
    import os

    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"audio: {len(clips)} clips, {total:.1f} s; {os.cpu_count()} CPUs, load average {load}")
    print(f"decode + resample to 48 kHz: {decode_s:.2f} s = {total / decode_s:.0f}x real time")
    cfg = BirdConfig()
    heard = {}
    for threads in args.threads:
        for batch in args.batch:
            model = Acoustic(threads=threads, batch_size=batch)
            model.probabilities(windows(audio[next(iter(audio))][: 48_000 * 3]))  # warm-up
            t0 = time.perf_counter()
            for key, x in audio.items():
                probs = model.probabilities(windows(x))
                heard[key] = detect(probs, len(x) / 48_000, cfg)
            wall = time.perf_counter() - t0
            print(
                f"inference, {threads} thread(s), batch {batch:2d}: {wall:.2f} s = "
                f"{total / wall:.0f}x real time; with decode {total / (wall + decode_s):.0f}x"
            )
    for key, found in heard.items():
        print(f"  {key}: " + ", ".join(f"{d.common} {d.max_confidence:.2f}" for d in found))
    t0 = time.perf_counter()
    grid, built = load_or_build(args.cache, resolution_deg=args.resolution, week=YEAR_ROUND, floor=0.01)
    print(
        f"birdrange grid ({args.resolution:g} deg, {grid.size} land cells, year-round): "
        f"{'built' if built else 'loaded from cache'} in {time.perf_counter() - t0:.2f} s"
    )
    for key, found in heard.items():
        species = [(d.scientific, d.max_confidence) for d in found if d.kind == "species"]
        if not species:
            print(f"  {key}: no species heard (abstains)")
            continue
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            guess = invert(grid, species)
            times.append(time.perf_counter() - t0)
        times.sort()
        print(
            f"  {key}: {len(species)} species -> {guess.city}, {guess.country}; per-clip latency "
            f"median {1000 * statistics.median(times):.2f} ms, p95 "
            f"{1000 * times[int(0.95 * (len(times) - 1))]:.2f} ms (warm cache)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
