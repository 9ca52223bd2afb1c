"""`agl audit duplicates|overlap`: clips that share an excerpt, within the dataset or with an
outside corpus (Chromaprint fingerprints; docs/baselines.md#duplicates-and-contamination)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from agl.core.checks import arg_type

    p = sub.add_parser(
        "audit",
        help="clips sharing an aligned excerpt: duplicates within the dataset, overlap with a corpus",
        description="Chromaprint fingerprints (fpcalc -raw) aligned by bit error rate: every "
        "pair of clips sharing an excerpt, with its offset and length (duplicates), or each "
        "clip's best match in an outside folder of audio (overlap).",
    )
    kinds = p.add_subparsers(dest="audit_kind", required=True, metavar="{duplicates,overlap}")
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


AUDIO = (".mp3", ".wav", ".flac", ".ogg", ".m4a", ".opus", ".aac")


def run(args: argparse.Namespace) -> int:
    import json
    import warnings
    from pathlib import Path

    from agl.dataset import fingerprints as fp
    from agl.dataset.manifest import ManifestWarning, clips, load_manifest
    from agl.errors import AglError

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
        from agl.dataset.manifest import write_manifest

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
