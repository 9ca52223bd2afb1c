"""DVC stage `duplicates`: every pair of clips sharing an aligned excerpt (Chromaprint; see
agl.dataset.fingerprints), the table evaluate joins into one cluster per recording.

Reads params.yaml `duplicates:`. With `duplicates.enabled: false` (the default) the table is
empty (its header only) and nothing is fingerprinted; true needs fpcalc (Debian's
libchromaprint-tools). The same pairs as `agl audit duplicates --json`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _params import load, run_main

from agl.core import canonical
from agl.dataset.fingerprints import DuplicatesConfig, duplicates_table
from agl.dataset.manifest import clips, load_manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--audio-root", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path, help="duplicates.csv")
    args = ap.parse_args(argv)
    cfg = DuplicatesConfig.from_params(load("duplicates")["duplicates"])
    table = duplicates_table(clips(load_manifest(args.manifest)), args.audio_root, cfg)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(table, args.out)
    print(f"duplicates: {len(table)} pair(s) of clips share an excerpt"
          + ("" if cfg.enabled else " (duplicates.enabled is false: nothing fingerprinted)"),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
