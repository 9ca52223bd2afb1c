"""The speech stage's speed (agl.speech.listen): x real time on the two real AGL1K clips in
../shared and on a 30-minute synthetic clip.

Per clip it prints decode + resample to 16 kHz, batched Silero VAD, Whisper language ID
(windows read of the clip's speech windows) and the whole, as seconds and x real time (audio
seconds per wall second). The synthetic clip is 30 minutes of quiet brown noise ("wind") with
espeak-ng English read eight times in it (~80 s of speech, three 30 s speech windows): VAD
must cover the whole clip, language ID should read one window and stop (English comes out
above `confident` 0.9 at once), so a long, mostly silent clip costs little. A second, speech-free 30-minute
clip shows the floor (no language ID at all).

Usage: python benchmarks/speech_speed.py [--threads 2] [--compute-type float32] [--repeats 2]
       [--archive ../shared/data/agl1k/archive]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO.parent / "shared" / "data" / "agl1k" / "archive"


def synthetic(out: Path, minutes: float, speech: bool) -> Path:
    import soundfile as sf

    from agl.speech.espeak import speak
    from agl.speech.listen import RATE, decode_16k

    rng = np.random.default_rng(0)
    n = int(minutes * 60 * RATE)
    from scipy.signal import butter, sosfilt

    # brown noise (integrated white noise), high-passed at 20 Hz so it does not drift
    wind = sosfilt(butter(2, 20.0, "highpass", fs=RATE, output="sos"), np.cumsum(rng.standard_normal(n)))
    wind = (wind * 0.01 / max(float(np.sqrt(np.mean(wind**2))), 1e-12)).astype(np.float32)
    if speech:
        en = decode_16k(speak("en", out.with_suffix(".en.wav"))) * 0.3
        for minute in (1, 5, 9, 13, 17, 21, 25, 28):
            start = int(minute * 60 * RATE)
            wind[start : start + len(en)] += en
    sf.write(str(out), wind, RATE)
    return out


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compute-type", default="float32", help="float32 (the stage's default) or int8")
    ap.add_argument("--repeats", type=int, default=2, help="median of this many passes per clip")
    ap.add_argument("--archive", type=Path, default=ARCHIVE)
    ap.add_argument("--minutes", type=float, default=30.0)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agl.speech.listen import RATE, Listener, SpeechConfig, decode_16k

    clips = sorted(Path(args.archive).glob("*/*.mp3"))
    if not clips:
        sys.exit(f"no clips under {args.archive}: ../shared must sit beside the checkout (or pass --archive)")
    tmp = Path(tempfile.mkdtemp(prefix="agl-speech-bench-"))
    t0 = time.perf_counter()
    long_speech = synthetic(tmp / "wind_with_speech.wav", args.minutes, True)
    long_quiet = synthetic(tmp / "wind.wav", args.minutes, False)
    print(f"made two {args.minutes:g}-minute synthetic clips in {time.perf_counter() - t0:.1f} s")
    cfg = SpeechConfig(threads=args.threads, compute_type=args.compute_type, cache_dir=str(REPO / "cache" / "whisper"))
    t0 = time.perf_counter()
    listener = Listener(cfg)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"model {cfg.model} ({cfg.compute_type}, {cfg.threads} thread(s)) loaded in "
          f"{time.perf_counter() - t0:.2f} s; {os.cpu_count()} CPUs, load average {load}")
    listener.listen_samples("warm-up", decode_16k(clips[0])[: 20 * RATE])
    print(f"{'clip':<44} {'audio s':>8} {'decode s':>9} {'vad s':>7} {'lid s':>7} {'windows':>8} "
          f"{'total s':>8} {'x real time':>12}  status / language")
    totals = [0.0, 0.0]
    for path in [*clips, long_speech, long_quiet]:
        runs = []
        for _ in range(max(1, args.repeats)):
            t0 = time.perf_counter()
            audio = decode_16k(path)
            decode = time.perf_counter() - t0
            r = listener.listen_samples(path.stem, audio)
            runs.append((time.perf_counter() - t0, decode, r))
        wall = statistics.median(w for w, _, _ in runs)
        _, decode, r = min(runs, key=lambda x: abs(x[0] - wall))
        lang = r.language or (f"({r.languages[0][0]} {r.languages[0][1]:.2f})" if r.languages else "-")
        print(f"{path.name[:44]:<44} {r.seconds:8.1f} {decode:9.2f} {r.extra['vad_s']:7.2f} {r.extra['lid_s']:7.2f} "
              f"{len(r.windows):>3} of {r.speech_windows:<2} {wall:8.2f} {r.seconds / wall:11.0f}x  {r.status} {lang}")
        totals[0] += r.seconds
        totals[1] += wall
    print(f"all clips: {totals[0]:.1f} s of audio in {totals[1]:.2f} s = {totals[0] / totals[1]:.0f}x real time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
