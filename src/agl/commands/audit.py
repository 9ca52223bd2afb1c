"""`agl audit duplicates|overlap`: clips that share an excerpt, within the dataset or with an
outside corpus (Chromaprint fingerprints; docs/baselines.md#duplicates-and-contamination).
`agl audit tags`: what a dataset's files say beside their sound, in their container tags and
file names (docs/data.md#what-the-files-carry)."""

from __future__ import annotations

import argparse
from pathlib import Path

from agl.core.checks import arg_type


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit",
        help="clips sharing an aligned excerpt: duplicates within the dataset, overlap with a corpus",
        description="Chromaprint fingerprints (fpcalc -raw) aligned by bit error rate: every "
        "pair of clips sharing an excerpt, with its offset and length (duplicates), or each "
        "clip's best match in an outside folder of audio (overlap).",
    )
    kinds = p.add_subparsers(dest="audit_kind", required=True, metavar="{duplicates,overlap,tags}")
    for name, text in (("duplicates", "every pair of the dataset's clips sharing an excerpt"),
                       ("overlap", "each clip's best match in an outside corpus (--corpus)")):
        q = kinds.add_parser(name, help=text, description=text)
        q.add_argument("--manifest", required=True, help="manifest CSV (AGL1K layout)")
        q.add_argument("--audio-root", required=True, help="folder of <key>/<mp3name> files")
        if name == "overlap":
            q.add_argument("--corpus", required=True, help="any folder of audio files (searched recursively)")
            q.add_argument("--cache", default="cache/fingerprints",
                           help="where the corpus's fingerprints are kept, by file SHA-256 "
                                "(default cache/fingerprints)")
            q.add_argument("--clean-manifest", metavar="OUT",
                           help="write the manifest of the clips with no match here: agl "
                                "evaluate --manifest OUT scores a run on them alone, with n")
        q.add_argument("--max-ber", type=arg_type("share_open"), default=None,
                       help="bit error rate at most this over the overlap (default 0.35)")
        q.add_argument("--min-overlap-s", type=arg_type("positive"), default=None,
                       help="overlap of at least this many seconds (default 10)")
        q.add_argument("--json", action="store_true", help="print one JSON object")
        q.set_defaults(func=run)
    _register_tags(kinds)


def _register_tags(kinds) -> None:
    text = ("which tags each clip's file carries (ID3v1/v2, APEv2, Vorbis comments, RIFF INFO, "
            "MP4 atoms), and whether a tag or the file name names the clip's true city, country "
            "or continent, holds coordinates near the truth, or holds a date; `agl download` "
            "writes the same table to data/tag_audit.csv")
    q = kinds.add_parser("tags", help="tags and file names that give a clip's place away",
                         description=text)
    q.add_argument("folder", type=Path, help="dataset folder (manifest.csv, audio/) or audio folder")
    q.add_argument("--manifest", type=Path, help="manifest CSV (default: FOLDER/manifest.csv)")
    q.add_argument("--audio-root", type=Path, help="audio at <root>/<key>/<mp3name> (default: FOLDER/audio)")
    q.add_argument("--no-manifest", action="store_true",
                   help="any audio folder: list tags and dates, no truth to compare places with")
    q.add_argument("--radius-km", type=float, default=25.0,
                   help="coordinates this close to the truth give the place away (default 25)")
    q.add_argument("--out", type=Path, help="write the table (CSV) here")
    q.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _audit_impl

    return _audit_impl.run(args)
