"""`agl play`: the human baseline — listen, click the map, and become a run on the leaderboard."""

from __future__ import annotations

import argparse
import getpass
import re
from pathlib import Path

from agl.errors import AglError


def _default_player() -> str:
    try:
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", getpass.getuser()).strip("-.")[:40]
    except (OSError, KeyError):
        name = ""
    return name or "player"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "play",
        help="listening game on a local web page; your guesses become the run human-<player>",
        description=(
            "Serve a local page that plays each clip of the manifest; click the map where you "
            "think it was recorded. Every guess is saved at once to "
            "build/runs/human-<player>/predictions.jsonl (a skip is a refusal), so you can "
            "stop any time and resume later; `agl evaluate` scores it like a model run."
        ),
    )
    p.add_argument(
        "--manifest", type=Path, default=Path("data/manifest.csv"),
        help="manifest CSV in the AGL1K layout (default: data/manifest.csv)",
    )
    p.add_argument(
        "--audio-root", type=Path, default=None,
        help="folder holding <key>/<mp3name> (default: 'audio' beside the manifest)",
    )
    p.add_argument("--player", default=None, help="your name (default: your login name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    p.add_argument(
        "--out", type=Path, default=None,
        help="run folder (default: build/runs/human-<player>)",
    )
    p.add_argument(
        "--order-seed", type=int, default=None,
        help="shuffle the clips with this seed (default: manifest order); keep it to resume",
    )
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p.add_argument(
        "--idle-timeout", type=float, default=20.0,
        help="seconds each request may take to arrive whole (idle wait, line, headers, body) "
             "before the connection is closed (default 20)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.core.paths import inside
    from agl.dataset.manifest import clips, load_manifest
    from agl.game.server import serve
    from agl.game.session import GameSession, check_player, run_name

    player = check_player(args.player if args.player is not None else _default_player())
    if not 0 < args.idle_timeout < 86400:  # also refuses nan and inf
        raise AglError(f"--idle-timeout {args.idle_timeout:g}: must be seconds, above 0 and below 86400")
    if not 0 <= args.port <= 65535:
        raise AglError(f"--port {args.port}: use 0-65535 (0 picks a free port)")
    manifest = load_manifest(args.manifest)
    audio_root = args.audio_root or args.manifest.parent / "audio"
    run_dir = args.out or Path("build/runs") / run_name(player)
    rows = clips(manifest)
    for c in rows:  # a link planted in the audio folder never serves a file from elsewhere
        inside(audio_root, audio_root / c.relpath)
    session = GameSession.open(rows, audio_root, player, run_dir, args.order_seed)
    try:
        serve(session, args.host, args.port, open_browser=not args.no_browser,
              idle_timeout_s=args.idle_timeout)
    except OSError as exc:
        session.close()
        raise AglError(
            f"cannot listen on {args.host}:{args.port} ({exc.strerror}); "
            "pass --port 0 for a free port"
        ) from None
    return 0
