"""DVC stage `speech`: seconds of speech (VAD) and the spoken language (Whisper) of every clip
that passed the filter (see agl.speech.listen).

Reads params.yaml `speech:` (`jobs`: processes here), and `executor:` undeclared (transport:
where the clips are heard never changes a byte; agl.executor). Writes one row per clip
(speech.csv: status ok | uncertain | no_speech | missing | unreadable | off, speech seconds,
language, probability, candidates), the segments and language-ID windows per clip
(speech_windows.jsonl), and a summary with the model's identity (file SHA-256s), the
thresholds and the licence. Timings (and where the clips ran) go beside the summary
(speech_summary.timings.json, never hashed). With `speech.enabled: false` every row has
status `off` and no model is loaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _params import ROOT, load, run_main

from agl.core import canonical, diskwrite
from agl.dataset.manifest import load_manifest
from agl.dataset.passed import clips_to_listen
from agl.executor.config import read_transport
from agl.speech.listen import SpeechConfig
from agl.speech.tables import frame, run_speech, timings, windows_jsonl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--audio-root", required=True, type=Path)
    ap.add_argument("--filter", required=True, type=Path, help="the filter stage's table")
    ap.add_argument("--out", required=True, type=Path, help="speech.csv")
    ap.add_argument("--windows", required=True, type=Path, help="speech_windows.jsonl")
    ap.add_argument("--summary", required=True, type=Path)
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    ap.add_argument("--params", type=Path, default=None, help="default: the repo's params.yaml")
    args = ap.parse_args(argv)
    section = load("speech", **({"path": args.params} if args.params else {}))["speech"]
    cfg = SpeechConfig.from_params(section)
    items, skipped = clips_to_listen(load_manifest(args.manifest), args.audio_root, args.filter, cfg.only_passed)
    facts: dict = {}
    results, info, wall = run_speech(items, cfg, read_transport(args.params or ROOT / "params.yaml"), facts)
    info = {**info, "skipped_by_filter": skipped}
    for path in (args.out, args.windows, args.summary):
        path.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(frame(results), args.out)
    diskwrite.write_text(args.windows, windows_jsonl(results))
    canonical.write_json(args.summary, info)
    canonical.write_timings(args.summary, {**timings(results, wall), **facts})  # where it ran: never hashed
    if args.headline:
        from agl.core.headline import speech_headline, write_headline

        write_headline(args.headline, speech_headline(info))
    print(
        f"speech: {info['listened']} clip(s) listened to, speech in {info['speech_heard']} "
        f"({sum(info['languages'].values())} with a language); {skipped} skipped (failed the filter); "
        f"{info['audio_seconds'] / max(wall, 1e-9):.0f}x real time",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    run_main(main)
