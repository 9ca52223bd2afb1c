"""`agl explore`: listen where the models failed — every run's guess, reasoning and
counterfactual beside the sound, one clip at a time (a local page, or a static folder)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _optional(text: str) -> Path | None:
    return None if text.strip().lower() == "none" else Path(text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explore",
        help="clip explorer: each clip's audio, every run's guess on a map, reasoning, variants",
        description=(
            "Serve a local page over the pipeline's outputs: a clip list to filter and sort "
            "(continent, country, speech, category, each run's error band, every run wrong, "
            "only one run right, free text), and a page per clip with its audio and "
            "spectrogram, the true place and every run's guess on one map, each run's "
            "reasoning, and the counterfactual variants side by side. The URL names the filter "
            "and the clip. --export DIR writes the same page as static files instead."
        ),
    )
    p.add_argument("--manifest", type=Path, default=Path("data/manifest.csv"),
                   help="manifest CSV (default: data/manifest.csv)")
    p.add_argument("--audio-root", type=Path, default=None,
                   help="folder holding <key>/<mp3name> (default: 'audio' beside the manifest)")
    p.add_argument("--runs", type=Path, nargs="+", default=None, metavar="DIR",
                   help="folders holding <run>/predictions.jsonl (+ scores_<protocol>.csv) "
                        "(default: build/runs build/paper)")
    p.add_argument("--birds", type=_optional, default=Path("build/curation/birds.csv"),
                   help="BirdNET table, or 'none' (default: build/curation/birds.csv)")
    p.add_argument("--speech", type=_optional, default=Path("build/curation/speech.csv"),
                   help="speech stage table (a `key` column), or 'none' "
                        "(default: build/curation/speech.csv)")
    p.add_argument("--perturb", type=_optional, default=Path("build/perturb"),
                   help="derived datasets <intervention>/<level>/, or 'none' (default: build/perturb)")
    p.add_argument("--listen", type=_optional, default=Path("build/listen"),
                   help="counterfactual runs <run>/<intervention>/<level>/, or 'none' "
                        "(default: build/listen)")
    p.add_argument("--protocol", choices=("paper", "strict"), default=None,
                   help="which score table to read (default: params.yaml report.protocol, "
                        "else paper)")
    p.add_argument("--wrong-km", type=float, default=None,
                   help="'wrong' where the country is not scored: farther than this (default: "
                        "params.yaml report.wrong_km, else 750)")
    p.add_argument("--export", type=Path, default=None, metavar="DIR",
                   help="write a static folder that opens from disk instead of serving")
    p.add_argument("--audio", choices=("copy", "none"), default="copy",
                   help="with --export: copy (hard-link) the audio in, or leave it out")
    p.add_argument("--no-spectrograms", action="store_true",
                   help="with --export: draw no spectrograms (faster)")
    p.add_argument("--jobs", type=int, default=2,
                   help="with --export: processes drawing spectrograms (default 2)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8766, help="0 picks a free port")
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p.add_argument("--idle-timeout", type=float, default=20.0,
                   help="seconds each request may take to arrive whole (idle wait included) "
                        "before the connection is closed (default 20)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _explore_impl

    return _explore_impl.run(args)
