"""What a very long clip costs the speech stage and langprior: a synthetic three-hour silent
FLAC (44.1 kHz stereo, 16-bit: the file that was killed after 600 s at 3 GB) heard under
`speech.max_listen_s` (default 600 s).

Each measurement runs in a fresh process (peak memory is the process's own maximum resident
set): the bounded decode alone (decode + resample to 16 kHz), the speech stage's listening
(`Listener.listen`: decode, batched Silero VAD; silence has no speech, so Whisper never runs)
and the langprior backend's reply. `--unbounded` adds the decode of the whole file, as it was
read before the bound (slow: minutes and gigabytes).

Usage: python benchmarks/long_clip.py [--hours 3] [--max-listen-s 600] [--unbounded]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make(path: Path, hours: float) -> None:
    """Silence, written a minute at a time (the file is ~2 MB: FLAC packs silence)."""
    import numpy as np
    import soundfile as sf

    minute = np.zeros((44_100 * 60, 2), dtype=np.int16)
    with sf.SoundFile(str(path), "w", 44_100, 2, "PCM_16", format="FLAC") as f:
        for _ in range(round(hours * 60)):
            f.write(minute)


def child(mode: str, path: Path, max_listen_s: float, cache: Path) -> dict:
    sys.path.insert(0, str(REPO / "src"))
    from agl.speech.listen import Listener, SpeechConfig, decode_16k, decode_bounded

    cfg = SpeechConfig(max_listen_s=max_listen_s, cache_dir=str(cache / "whisper"), heard_cache=None)
    t0 = time.perf_counter()
    if mode == "decode":
        audio, cut = decode_bounded(path, max_listen_s)
        out = {"seconds": len(audio) / 16_000, "cut": cut}
    elif mode == "unbounded":
        out = {"seconds": len(decode_16k(path)) / 16_000}
    elif mode == "listen":
        heard = Listener(cfg).listen("long", path)
        out = {"status": heard.status, "seconds": heard.seconds, "cut": heard.cut}
    else:
        import asyncio

        from agl.backends import get_backend
        from agl.contracts.calls import Request

        backend = get_backend("langprior")(max_listen_s=max_listen_s, cache_dir=cfg.cache_dir, heard_cache=None)
        reply = asyncio.run(backend.generate(Request("long", "", audio_path=path)))
        out = {"status": reply.status.value, "listened_s": reply.extra.get("listened_s")}
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--max-listen-s", type=float, default=600.0, help="params.yaml speech.max_listen_s")
    ap.add_argument("--unbounded", action="store_true", help="also decode the whole file (minutes, GBs)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "PATH", "CACHE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        mode, path, cache = args.child
        print(json.dumps(child(mode, Path(path), args.max_listen_s, Path(cache))))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="agl-long-clip-"))
    path = tmp / "silent.flac"
    t0 = time.perf_counter()
    make(path, args.hours)
    print(f"{args.hours:g} h of silence, 44.1 kHz stereo FLAC: {path.stat().st_size / 1e6:.1f} MB, "
          f"written in {time.perf_counter() - t0:.1f} s; {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    modes = ["decode", "listen", "langprior"] + (["unbounded"] if args.unbounded else [])
    for mode in modes:
        done = subprocess.run([sys.executable, __file__, "--max-listen-s", str(args.max_listen_s), "--child", mode,
                               str(path), str(REPO / "cache")], capture_output=True, text=True)
        if done.returncode:
            print(f"{mode}: failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            continue
        print(f"{mode:>10}: {done.stdout.strip().splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
