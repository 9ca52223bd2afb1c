"""How fast each intervention runs, in x real time, on the two real AGL1K MP3s in ../shared.

usage: python benchmarks/perturb_speed.py [--repeat N]
Decoding is timed once per clip and reported apart; each intervention is timed on the decoded
samples (44.1 kHz stereo, as published), VAD included for mask_speech / keep_speech; then
with the encoding `perturb@<name>` adds (FLAC, or MP3 through libsndfile's LAME, the default
`counterfactual.format`). x real time = audio seconds / wall seconds (higher is faster).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "agl1k" / "archive"
SPECS = {
    "none": {"kind": "none"},
    "mask_speech": {"kind": "mask_speech", "fill": "background"},
    "mask_speech (noise fill)": {"kind": "mask_speech", "fill": "noise"},
    "keep_speech": {"kind": "keep_speech"},
    "truncate 10 s": {"kind": "truncate", "seconds": 10},
    "noise 10 dB pink": {"kind": "noise", "snr_db": 10},
    "channel gsm": {"kind": "channel", "codec": "gsm"},
    "channel mp3": {"kind": "channel", "codec": "mp3"},
    "reverb rt60 0.8 s": {"kind": "reverb", "rt60_s": 0.8},
    "reverse": {"kind": "reverse"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    from agl.counterfactual import _mp3_rate, encode, read_audio
    from agl.perturb import apply, parse_perturb, resample, speech_segments

    clips = sorted(SHARED.glob("*/*.mp3"))
    if len(clips) != 2:
        raise SystemExit(f"expected the two real MP3s under {SHARED}")
    decoded = []
    for path in clips:
        t0 = time.perf_counter()
        x, sr = read_audio(path)
        dt = time.perf_counter() - t0
        decoded.append((path.parent.name, x, sr))
        print(
            f"decode {path.parent.name}: {x.shape[0] / sr:.1f} s, {sr} Hz x {x.shape[1]} ch "
            f"in {dt:.2f} s ({x.shape[0] / sr / dt:.0f}x real time)"
        )
    speech_segments(decoded[0][1][: decoded[0][2]], decoded[0][2])  # load silero once
    print(f"{'intervention':26s} {'x real time':>12s} {'+ flac':>8s} {'+ mp3':>8s}  (per clip, alone)")
    for label, spec in SPECS.items():
        iv = parse_perturb({"b": {**spec, "seed": 0}})["b"][0]
        audio_s = 0.0
        wall = {"alone": 0.0, "flac": 0.0, "mp3": 0.0}
        per = []
        for key, x, sr in decoded:
            best = {k: float("inf") for k in wall}
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                y, rate, _ = apply(iv, x, sr, key=key)
                t1 = time.perf_counter()
                encode(y, rate, "flac")
                t2 = time.perf_counter()
                target = _mp3_rate(rate)
                z = resample(y, rate, target) if target != rate else y
                encode(z, target, "mp3")
                t3 = time.perf_counter()
                for k, v in (("alone", t1 - t0), ("flac", t2 - t0), ("mp3", t1 - t0 + t3 - t2)):
                    best[k] = min(best[k], v)
            audio_s += x.shape[0] / sr
            for k in wall:
                wall[k] += best[k]
            per.append(f"{x.shape[0] / sr / best['alone']:.0f}x")
        print(
            f"{label:26s} {audio_s / wall['alone']:11.0f}x {audio_s / wall['flac']:7.0f}x "
            f"{audio_s / wall['mp3']:7.1f}x  ({', '.join(per)})"
        )


if __name__ == "__main__":
    main()
