"""`agl audit duplicates|overlap`: clips that share an excerpt, within the dataset or with an
outside corpus (Chromaprint fingerprints; docs/baselines.md#duplicates-and-contamination).
`agl audit tags`: what a dataset's files say beside their sound, in their container tags and
file names (docs/data.md#what-the-files-carry)."""

from __future__ import annotations

import argparse

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
    from pathlib import Path

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
    q.set_defaults(func=run_tags)


def run_tags(args: argparse.Namespace) -> int:
    import sys

    from agl.core.outpaths import input_file, output_file  # lazy: `agl --help` imports every command module
    from agl.dataset import tag_audit  # lazy, as above
    from agl.errors import AglError  # lazy, as above

    if not args.folder.is_dir():
        raise AglError(f"{args.folder}: not a folder; give a dataset folder or a folder of audio")
    if not (args.radius_km > 0 and args.radius_km < float("inf")):
        raise AglError(f"--radius-km must be a positive number of km, not {args.radius_km}")
    if args.out is not None:
        output_file(args.out, "--out")
    if args.no_manifest:
        rows = tag_audit.audit_files(args.folder)
    else:
        from agl.dataset.manifest import clips, load_manifest  # (lazy, as above)

        manifest = args.manifest or args.folder / "manifest.csv"
        input_file(manifest, "--manifest", "manifest CSV (or --no-manifest for any audio folder)")
        rows = tag_audit.audit(clips(load_manifest(manifest)), args.audio_root or args.folder / "audio",
                               args.radius_km)
    for r in rows:
        if r.findings or r.tags:
            print(f"{r.file}: {len(r.tags)} tags" + "".join(f"\n  {f}" for f in r.findings))
    if args.out is not None:
        tag_audit.write_table(rows, args.out)
    sys.stdout.flush()
    print(tag_audit.summary_line(rows) if not args.no_manifest else
          f"{sum(bool(r.tags) for r in rows)} of {len(rows)} files carry tags; "
          f"{sum(r.dated('tags') for r in rows)} a date in them", file=sys.stderr)
    return 0


AUDIO = (".mp3", ".wav", ".flac", ".ogg", ".m4a", ".opus", ".aac")


def run(args: argparse.Namespace) -> int:
    import json
    import warnings
    from pathlib import Path

    from agl.dataset import fingerprints as fp  # lazy: `agl --help` imports every command module
    from agl.dataset.manifest import ManifestWarning, clips, load_manifest  # (lazy, as above)
    from agl.errors import AglError  # (lazy, as above)

    max_ber = fp.MAX_BER if args.max_ber is None else args.max_ber
    min_s = fp.MIN_OVERLAP_S if args.min_overlap_s is None else args.min_overlap_s
    fp.fpcalc_path()  # one line before any work when it is missing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        frame = load_manifest(args.manifest)
        rows = clips(frame)
    root = Path(args.audio_root)
    prints = {}
    for c in rows:
        path = root / c.relpath
        if not path.is_file():
            raise AglError(f"{path}: missing (clip {c.key}); run agl download or fix --audio-root")
        prints[c.key] = fp.fingerprint(path)
    limits = {"max_ber": max_ber, "min_overlap_s": min_s}
    if args.audit_kind == "duplicates":
        pairs = fp.duplicates(prints, **limits)
        groups = fp.groups([(m.a, m.b) for m in pairs])
        if args.json:
            print(json.dumps({"clips": len(rows), **limits, "pairs": [m.as_dict() for m in pairs],
                              "clips_in_pairs": len(groups),
                              "recordings": len(set(groups.values()))}, indent=1))
            return 0
        print(f"{len(rows)} clips; {len(pairs)} pair(s) share an excerpt (BER <= {max_ber:g}, "
              f">= {min_s:g} s): {len(groups)} clip(s) in {len(set(groups.values()))} recording(s)")
        for m in pairs:
            print(f"{m.a}  {m.b}  offset {m.offset_s:+.2f} s  overlap {m.length_s:.1f} s "
                  f"(from {m.start_a_s:.1f} s in {m.a}, {m.start_b_s:.1f} s in {m.b})  BER {m.ber:.3f}")
        return 0
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        raise AglError(f"--corpus {corpus}: not a folder")
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO)
    cache = Path(args.cache)
    outside = {str(p.relative_to(corpus)): fp.cached_fingerprint(p, cache) for p in files}
    best = {}
    for key, words in prints.items():
        found = [m for name, other in outside.items()
                 if (m := fp.match(key, words, name, other, **limits)) is not None]
        best[key] = max(found, key=lambda m: (m.length_s, -m.ber)) if found else None
    clean = sorted(k for k, m in best.items() if m is None)
    if args.clean_manifest:
        from agl.dataset.manifest import write_manifest  # lazy: only --clean-manifest writes one

        write_manifest(frame[frame["key"].isin(clean)], args.clean_manifest)
    if args.json:
        print(json.dumps({"clips": len(rows), "corpus_files": len(files), **limits,
                          "matches": {k: m.as_dict() for k, m in best.items() if m is not None},
                          "unmatched": clean, "n_unmatched": len(clean)}, indent=1))
        return 0
    print(f"{len(rows)} clips against {len(files)} corpus file(s): {len(rows) - len(clean)} "
          f"overlap one, {len(clean)} do not (BER <= {max_ber:g}, >= {min_s:g} s)")
    for k, m in best.items():
        if m is not None:
            print(f"{k}  {m.b}  offset {m.offset_s:+.2f} s  overlap {m.length_s:.1f} s  BER {m.ber:.3f}")
    return 0
