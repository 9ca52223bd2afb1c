"""The work of `agl explore` (agl.commands.explore registers the command and imports this
module when it runs): load the pipeline's outputs, then serve them or write a static folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agl.core.yamlfile import load_yaml
from agl.errors import AglError
from agl.explore.export import export
from agl.explore.server import serve
from agl.explore.sources import ExplorePaths, load


def _report_params() -> dict:
    """params.yaml's `report` section where the command runs in the repository, else {}."""
    path = Path("params.yaml")
    if not path.is_file():
        return {}
    section = load_yaml(path).get("report")
    if section is not None and not isinstance(section, dict):
        raise AglError(f"{path}: report: expected a mapping of settings")
    return section or {}


def run(args: argparse.Namespace) -> int:
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
    try:
        serve(explorer, args.host, args.port, open_browser=not args.no_browser,
              idle_timeout_s=args.idle_timeout)
    except OSError as exc:
        raise AglError(f"cannot listen on {args.host}:{args.port} ({exc.strerror}); "
                       "pass --port 0 for a free port") from None
    return 0


def _export(explorer, args: argparse.Namespace) -> int:
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
