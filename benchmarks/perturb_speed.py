"""How fast each intervention runs, in x real time, on the two real AGL1K MP3s in ../shared.

usage: python benchmarks/perturb_speed.py [--repeat N]
Decoding is timed once per clip and reported apart; each intervention is timed on the decoded
samples (44.1 kHz stereo, as published), VAD included for mask_speech / keep_speech. Writing
the result costs the same for every intervention and is timed apart, once per format (FLAC;
MP3 through libsndfile's LAME, the default `counterfactual.format`). x real time = audio
seconds / wall seconds (higher is faster).
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
    from agl.core.audio import decode
    from agl.counterfactual.encode import encode
    from agl.counterfactual.perturb import apply, parse_perturb, speech_segments

    clips = sorted(SHARED.glob("*/*.mp3"))
    if len(clips) != 2:
        raise SystemExit(f"expected the two real MP3s under {SHARED}")
    decoded = []
    for path in clips:
        t0 = time.perf_counter()
        x, sr = decode(path)
        dt = time.perf_counter() - t0
        decoded.append((path.parent.name, x, sr))
        print(
            f"decode {path.parent.name}: {x.shape[0] / sr:.1f} s, {sr} Hz x {x.shape[1]} ch "
            f"in {dt:.2f} s ({x.shape[0] / sr / dt:.0f}x real time)"
        )
    for fmt in ("flac", "mp3"):  # writing the result: the same for every intervention
        t0 = time.perf_counter()
        for _, x, sr in decoded:
            encode(x, sr, fmt)
        dt = time.perf_counter() - t0
        print(f"encode {fmt}: {sum(x.shape[0] / sr for _, x, sr in decoded) / dt:.1f}x real time")
    speech_segments(decoded[0][1][: decoded[0][2]], decoded[0][2])  # load silero once
    print(f"{'intervention':26s} {'x real time':>12s}  (per clip)")
    for label, spec in SPECS.items():
        iv = parse_perturb({"b": {**spec, "seed": 0}})["b"][0]
        audio_s = wall = 0.0
        per = []
        for key, x, sr in decoded:
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                apply(iv, x, sr, key=key)
                best = min(best, time.perf_counter() - t0)
            audio_s += x.shape[0] / sr
            wall += best
            per.append(f"{x.shape[0] / sr / best:.0f}x")
        print(f"{label:26s} {audio_s / wall:11.0f}x  ({', '.join(per)})")


if __name__ == "__main__":
    main()
