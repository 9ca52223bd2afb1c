"""How the speech stage's identifier (Whisper base from the pinned PyPI wheels) labels
espeak-ng speech in 20 languages: a confusion table.

Each language's phrase (agl.speech.espeak) is spoken by espeak-ng's default voice and by a
second variant (`+f2`), and goes through the stage's listening exactly (VAD, windows,
thresholds of params.yaml `speech:` defaults). Printed: per clip the top three languages and
the status; then the confusion table (rows: language spoken, columns: top-1 language heard,
`uncertain` where the top is below min_language_probability); then top-1 and `ok` accuracy.

Robotic formant speech is a smoke test, not a measure on field recordings: see docs/speech.md.

Usage: python benchmarks/speech_langid.py [--voices "" +f2] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voices", nargs="+", default=["", "+f2"], help="espeak-ng voice variants ('' = default)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agl.speech.espeak import PHRASES
    from agl.speech.listen import Listener, SpeechConfig

    cfg = SpeechConfig(threads=args.threads, cache_dir=str(REPO / "cache" / "whisper"))
    listener = Listener(cfg)
    tmp = Path(tempfile.mkdtemp(prefix="agl-langid-"))
    results = []  # (spoken, variant, status, top list)
    print(f"{'spoken':<7}{'voice':<6}{'speech s':>9}  {'status':<10} top three heard")
    for lang, (voice, text) in PHRASES.items():
        for variant in args.voices:
            wav = tmp / f"{lang}{variant}.wav"
            subprocess.run(["espeak-ng", "-v", voice + variant, "-w", str(wav), text], check=True, capture_output=True)
            r = listener.listen(lang, wav)
            top = ", ".join(f"{c} {p:.2f}" for c, p in r.languages[:3]) or "-"
            print(f"{lang:<7}{variant or 'dflt':<6}{r.speech_seconds:9.1f}  {r.status:<10} {top}")
            results.append((lang, variant, r.status, r.languages))
    heard_cols = sorted({t[0][0] for *_, t in results if t})
    print(f"\nconfusion (rows: spoken; columns: top-1 heard; a count with 'u': top-1 below "
          f"min_language_probability {cfg.min_language_probability}, status uncertain; "
          f"{len(args.voices)} voice(s) per language)")
    width = max(4, *(len(c) for c in heard_cols))
    print(" " * 8 + " ".join(f"{c:>{width}}" for c in heard_cols))
    for lang in PHRASES:
        ok = dict.fromkeys(heard_cols, 0)
        unsure = dict.fromkeys(heard_cols, 0)
        for spoken, _, status, top in results:
            if spoken == lang and top:
                (unsure if status == "uncertain" else ok)[top[0][0]] += 1
        cells = [("+".join(x for x in (str(ok[c]) if ok[c] else "", f"{unsure[c]}u" if unsure[c] else "") if x)
                  or ".") for c in heard_cols]
        print(f"{lang:<8}" + " ".join(f"{x:>{width}}" for x in cells))
    n = len(results)
    top1 = sum(bool(t) and t[0][0] == lang for lang, _, _, t in results)
    ok = sum(s == "ok" and t[0][0] == lang for lang, _, s, t in results)
    wrong_ok = sum(s == "ok" and t[0][0] != lang for lang, _, s, t in results)
    print(f"\ntop-1 correct: {top1} of {n}; identified (status ok) and correct: {ok} of {n}; "
          f"status ok but wrong: {wrong_ok}; uncertain: {sum(s == 'uncertain' for _, _, s, _ in results)}; "
          f"no_speech: {sum(s == 'no_speech' for _, _, s, _ in results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
