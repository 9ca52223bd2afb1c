"""The work of `agl audit` (agl.commands.audit registers the command and imports this
module when it runs): fingerprints for duplicates and overlap, tags and file names."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from agl.core.outpaths import input_file, output_file
from agl.dataset import fingerprints as fp
from agl.dataset import tag_audit
from agl.dataset.manifest import ManifestWarning, clips, load_manifest, write_manifest
from agl.errors import AglError


def run(args: argparse.Namespace) -> int:
    """`agl audit tags`, or `agl audit duplicates|overlap`."""
    return run_tags(args) if args.audit_kind == "tags" else run_fingerprints(args)


def run_tags(args: argparse.Namespace) -> int:
    if not args.folder.is_dir():
        raise AglError(f"{args.folder}: not a folder; give a dataset folder or a folder of audio")
    if not (args.radius_km > 0 and args.radius_km < float("inf")):
        raise AglError(f"--radius-km must be a positive number of km, not {args.radius_km}")
    if args.out is not None:
        output_file(args.out, "--out")
    if args.no_manifest:
        rows = tag_audit.audit_files(args.folder)
    else:
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


def run_fingerprints(args: argparse.Namespace) -> int:
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
