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


def _report_params() -> dict:
    """params.yaml's `report` section where the command runs in the repository, else {}."""
    from agl.core.yamlfile import load_yaml  # the one reader of configuration YAML
    from agl.errors import AglError  # lazy: `agl --help` imports every command module

    path = Path("params.yaml")
    if not path.is_file():
        return {}
    section = load_yaml(path).get("report")
    if section is not None and not isinstance(section, dict):
        raise AglError(f"{path}: report: expected a mapping of settings")
    return section or {}


def run(args: argparse.Namespace) -> int:
    from agl.errors import AglError  # a command's lazy load: `agl --help` stays instant
    from agl.explore.sources import ExplorePaths, load  # a command's lazy load

    report = _report_params()
    protocol = args.protocol or str(report.get("protocol") or "paper")
    if protocol not in ("paper", "strict"):
        raise AglError(f"params.yaml report.protocol {protocol!r}: use paper or strict")
    try:
        wrong_km = float(args.wrong_km if args.wrong_km is not None else report.get("wrong_km", 750.0))
    except (TypeError, ValueError):
        raise AglError("params.yaml report.wrong_km: not a number of km") from None
    if not wrong_km > 0:
        raise AglError(f"--wrong-km {wrong_km:g}: must be a positive number of km")
    if not args.idle_timeout > 0:
        raise AglError(f"--idle-timeout {args.idle_timeout:g}: must be a positive number of seconds")
    if not 0 <= args.port <= 65535:
        raise AglError(f"--port {args.port}: use 0-65535 (0 picks a free port)")
    if args.jobs < 1:
        raise AglError(f"--jobs {args.jobs}: use 1 or more")
    roots = tuple(args.runs) if args.runs else (Path("build/runs"), Path("build/paper"))
    paths = ExplorePaths(manifest=args.manifest, audio_root=args.audio_root, run_roots=roots,
                         birds=args.birds, speech=args.speech, perturb=args.perturb,
                         listen=args.listen, protocol=protocol, wrong_km=wrong_km)
    explorer = load(paths)
    if args.export is not None:
        return _export(explorer, args)
    from agl.explore.server import serve  # a command's lazy load

    try:
        serve(explorer, args.host, args.port, open_browser=not args.no_browser,
              idle_timeout_s=args.idle_timeout)
    except OSError as exc:
        raise AglError(f"cannot listen on {args.host}:{args.port} ({exc.strerror}); "
                       "pass --port 0 for a free port") from None
    return 0


def _export(explorer, args: argparse.Namespace) -> int:
    import sys

    from agl.explore.export import export  # a command's lazy load

    for note in explorer.notes:
        print(f"agl explore: note: {note}", file=sys.stderr)
    done = export(explorer, args.export, audio=args.audio == "copy",
                  spectrograms=not args.no_spectrograms, jobs=args.jobs,
                  progress=lambda line: print(f"agl explore: {line}", file=sys.stderr, flush=True))
    index = Path(done["folder"]).resolve() / "index.html"
    print(f"agl explore: wrote {done['folder']}: {done['clips']} clips, {done['audio_files']} "
          f"audio file(s), {done['spectrograms']} spectrogram(s)"
          + (f", {done['spectrogram_problems']} not drawn (noted on their pages)"
             if done["spectrogram_problems"] else "")
          + f"; open {index.as_uri()}")
    return 0
