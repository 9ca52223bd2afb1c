"""Build `../shared`, the test and reference data, from public pinned sources with checksums.

The project's tests and benchmarks read real files from a folder `shared/` beside the
checkout (`tests/conftest.py`): the published AGL1K manifest and two of the authors' result
files from their repository at the pinned commit, two real Aporee recordings from the Internet
Archive, and the AudioSet ontology. None of it is copied into this repository's history;
`agl shared` downloads each file from its public home, checks its SHA-256 against the value
pinned below before writing it (atomically), and skips a file already present with the right
checksum, so a rerun makes no request. `paper_leaderboard.csv` is the paper's leaderboard as
shipped in this package (`agl/data/paper_values.csv`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from agl.core.nofollow import write_part
from agl.dataset.checksums import file_digest
from agl.dataset.fetch import Policy, fetch_to_file, make_client
from agl.dataset.ontology_pin import ONTOLOGY_SHA256, ONTOLOGY_URL
from agl.dataset.sources import MANIFEST_PATH, MANIFEST_SHA256, PINNED_BASE_URL, paper_values_path
from agl.errors import AglError

ARCHIVE_URL = "https://archive.org/download"


@dataclass(frozen=True)
class SharedFile:
    dest: str  # path under shared/
    source: str  # "agl1k", "archive", "ontology" or "package"
    path: str  # path under that source's base URL (or package file name)
    sha256: str


FILES: tuple[SharedFile, ...] = (
    SharedFile("data/agl1k/geoLocalization_schema.csv", "agl1k", MANIFEST_PATH, MANIFEST_SHA256),
    SharedFile(
        "data/agl1k/published/qwen25-omni/seed_42_progress_fixed.json",
        "agl1k",
        "results/audio_localization/qwen25-omni/seed_42_progress_fixed.json",
        "640190737106d95abed554a88783dfe2a50e8d18866ec67dc46bd8d2732c3e08",
    ),  # fmt: skip
    SharedFile(
        "data/agl1k/published/gemini-3-pro-preview/seed_42_ABCD.jsonl",
        "agl1k",
        "results/audio_localization/google/gemini-3-pro-preview/seed_42_ABCD.jsonl",
        "5bfac935370ec93d742f0bcc4b4f609a2e42b9feb5be6167f6cdc41384a20361",
    ),  # fmt: skip
    SharedFile(
        "data/agl1k/archive/aporee_26839_30948/20020207EssaouiraRempartsMuezzin.mp3",
        "archive",
        "aporee_26839_30948/20020207EssaouiraRempartsMuezzin.mp3",
        "76b790c79c4e3949771fe1f71ca573f96ae118d166a1eeba4fa389908bc8beaf",
    ),  # fmt: skip
    SharedFile(
        "data/agl1k/archive/aporee_5201_6631/AmselanDietersFensterJuni2003Edit.mp3",
        "archive",
        "aporee_5201_6631/AmselanDietersFensterJuni2003Edit.mp3",
        "e9ed3f016b34c23d80231cfc65cd86957a3066e01156947f456e50c3102e9b66",
    ),  # fmt: skip
    SharedFile("data/audioset/ontology.json", "ontology", "", ONTOLOGY_SHA256),
    SharedFile(
        "data/agl1k/paper_leaderboard.csv",
        "package",
        "paper_values.csv",
        "8d8298acc92afd82907ef9ebd0882df626832c138a87a498669face36871209f",
    ),  # fmt: skip
)


def source_url(item: SharedFile, *, agl1k_base: str, archive_base: str, ontology_url: str) -> str:
    if item.source == "ontology":
        return ontology_url
    base = agl1k_base if item.source == "agl1k" else archive_base
    return base.rstrip("/") + "/" + item.path


def build_shared(
    out: str | Path,
    *,
    agl1k_base: str = PINNED_BASE_URL,
    archive_base: str = ARCHIVE_URL,
    ontology_url: str = ONTOLOGY_URL,
    policy=None,
) -> dict[str, str]:
    """Fill `out` with every file of FILES; returns {dest: "present" | "downloaded" | error}.

    Every file is tried; afterwards an AglError lists the ones that could not be had."""
    # the downloader's modules, loaded only when files are fetched

    out = Path(out)
    policy = policy or Policy(progress=False)
    status: dict[str, str] = {}
    client = make_client(policy)
    try:
        for item in FILES:
            dest = out / item.dest
            if dest.is_file() and file_digest(dest).sha256 == item.sha256:
                status[item.dest] = "present"
                continue
            status[item.dest] = _one(item, dest, policy, client, paper_values_path(),
                                     agl1k_base, archive_base, ontology_url)
    finally:
        client.close()
    for dest, what in status.items():
        print(f"agl shared: {dest}: {what}", file=sys.stderr)
    bad = {d: w for d, w in status.items() if w not in ("present", "downloaded")}
    if bad:
        raise AglError(f"{len(bad)} of {len(FILES)} file(s) could not be had ("
                       + "; ".join(bad.values()) + "); fix the source or rerun")  # fmt: skip
    return status


def _one(item: SharedFile, dest: Path, policy, client, package_file: Path, agl1k_base: str,
         archive_base: str, ontology_url: str) -> str:
    """Bring one file to `dest` through `<dest>.part` (streamed, bounded, SHA-256 checked
    before the rename); "downloaded", or why it could not be had (nothing left behind)."""
    # the downloader's modules, loaded only when files are fetched

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    if item.source == "package":
        where = str(package_file)
        write_part(part, package_file.read_bytes())  # never through a link planted at `part`
        got = file_digest(part).sha256
    else:
        where = source_url(item, agl1k_base=agl1k_base, archive_base=archive_base,
                           ontology_url=ontology_url)  # fmt: skip
        try:
            got = fetch_to_file(where, part, policy, client)
        except AglError as exc:
            return str(exc)
    if got != item.sha256:
        part.unlink(missing_ok=True)
        return f"{where}: SHA-256 {got} does not match the pinned {item.sha256}; not written"
    os.replace(part, dest)
    return "downloaded"
