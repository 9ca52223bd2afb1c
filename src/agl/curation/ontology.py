"""The AudioSet ontology: roll 527 tagger class scores up to AGL1K's category columns.

The ontology (github.com/audioset/ontology, CC BY-SA 4.0) has 632 classes linked by
`child_ids` under 7 roots. A tagger scores 527 of them (AudioSet's released label set, listed
in `agl/data/audioset_527.txt` in output order). A class belongs to every root it reaches
through any chain of parents: 29 of the 527 reach more than one root (27 reach two, e.g.
"Church bell": Music and Sounds of things, "Hubbub, speech noise": Human sounds and Channel,
environment and background; "Hiss" and "Cowbell" reach three), and such a class counts in
each of its roots, with its full score, not split between them.

AGL1K has 8 category columns for the 7 roots: the root "Channel, environment and background"
is split into `channel` and `environment_and_background` by its three children:
  - "Sound reproduction" (Television, Radio, Field recording, ...)  -> `channel`
    (the channel the sound reached the microphone through);
  - "Acoustic environment" (Inside/Outside, Reverberation, Echo) and "Noise" (Background
    noise, Environmental noise, Hubbub, Static, Mains hum, White/Pink noise, ...)
    -> `environment_and_background`.
AGL1K's authors do not publish their mapping; this one follows the ontology's own split.

A root column's score is the maximum over its classes' scores (a category is present as soon
as one of its classes is): `rollup`.

Where the ontology comes from: tests read `../shared/data/audioset/ontology.json`; real runs
fetch the pinned public URL once into a local cache (sha256 checked). The offline demo uses
the `precomputed` tagger, which needs no ontology. Nothing of the ontology is committed here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.dataset.ontology_pin import ONTOLOGY_SHA256, ONTOLOGY_URL
from agl.errors import AglError
from agl.http import client as http

CEB_ROOT = "/t/dd00123"  # Channel, environment and background
ROOT_COLUMNS: dict[str, str] = {
    "/m/0dgw9r": "human_sounds",
    "/m/0jbk": "animal",
    "/m/04rlf": "music",
    "/m/059j3w": "natural_sounds",
    "/t/dd00041": "sounds_of_things",
    "/t/dd00098": "source_ambiguous_sounds",
}
# The children of CEB_ROOT, each to one AGL1K column.
CEB_CHILD_COLUMNS: dict[str, str] = {
    "/m/07bm98": "channel",  # Sound reproduction
    "/t/dd00093": "environment_and_background",  # Acoustic environment
    "/m/096m7z": "environment_and_background",  # Noise
}


@dataclass(frozen=True)
class OntologyClass:
    id: str
    name: str
    child_ids: tuple[str, ...]
    restrictions: tuple[str, ...]


class Ontology:
    """Classes by id, with parent links and the roots each class reaches."""

    def __init__(self, classes: Iterable[OntologyClass], source: str = "<ontology>"):
        self.classes = {c.id: c for c in classes}
        self.source = source
        self.parents: dict[str, list[str]] = {}
        for c in self.classes.values():
            for child in c.child_ids:
                if child not in self.classes:
                    raise AglError(f"{source}: class {c.id} names unknown child {child}")
                self.parents.setdefault(child, []).append(c.id)
        self.by_name = {c.name: c.id for c in self.classes.values()}

    @cached_property
    def roots(self) -> list[str]:
        return [i for i in self.classes if i not in self.parents]

    def paths_to_roots(self, class_id: str) -> list[tuple[str, ...]]:
        """Every chain of ids from `class_id` up to a root (the class first, the root last)."""
        if class_id not in self.classes:
            raise AglError(f"{self.source}: unknown class id {class_id}")
        if class_id not in self.parents:
            return [(class_id,)]
        out: list[tuple[str, ...]] = []
        for parent in self.parents[class_id]:
            out.extend((class_id, *p) for p in self.paths_to_roots(parent))
        return out

    def roots_of(self, class_id: str) -> frozenset[str]:
        return frozenset(p[-1] for p in self.paths_to_roots(class_id))

    def columns_of(self, class_id: str) -> frozenset[str]:
        """The AGL1K category columns a class counts in (one per root reached; see module doc)."""
        cols = set()
        for path in self.paths_to_roots(class_id):
            root = path[-1]
            if root == CEB_ROOT:
                if len(path) == 1:  # the root itself is abstract; never a tagger class
                    cols.update(("channel", "environment_and_background"))
                else:
                    child = path[-2]
                    if child not in CEB_CHILD_COLUMNS:
                        raise AglError(f"{self.source}: '{self.classes[child].name}' under "
                                       "'Channel, environment and background' has no AGL1K column")
                    cols.add(CEB_CHILD_COLUMNS[child])
            elif root in ROOT_COLUMNS:
                cols.add(ROOT_COLUMNS[root])
            else:
                raise AglError(f"{self.source}: root {root} is not one of AudioSet's 7 roots")
        return frozenset(cols)

    def resolve(self, label: str) -> str:
        """A tagger label (an ontology id or a class name) to its ontology id."""
        if label in self.classes:
            return label
        if label in self.by_name:
            return self.by_name[label]
        raise AglError(f"tagger label '{label}' is neither an id nor a class name of the "
                       f"AudioSet ontology ({self.source}); use an AudioSet checkpoint")


def load_ontology(path: str | Path) -> Ontology:
    """Parse ontology.json; a malformed file is an AglError naming the file and entry."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AglError(f"{path}: ontology not found; fetch it with fetch_ontology") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AglError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, list):
        raise AglError(f"{path}: expected a JSON list of classes")
    classes = []
    for n, e in enumerate(raw):
        try:
            classes.append(OntologyClass(str(e["id"]), str(e["name"]), tuple(e["child_ids"]),
                                         tuple(e.get("restrictions") or ())))
        except (KeyError, TypeError):
            raise AglError(f"{path}: entry {n} lacks id/name/child_ids") from None
    return Ontology(classes, source=str(path))


def fetch_ontology(cache_dir: str | Path, url: str = ONTOLOGY_URL,
                   sha256: str | None = ONTOLOGY_SHA256, timeout_s: float = 60.0) -> Path:
    """The pinned ontology.json in `cache_dir`, downloaded once and checked by SHA-256."""
    cache_dir = Path(cache_dir)
    target = cache_dir / "ontology.json"
    if target.exists() and (sha256 is None or _sha256(target.read_bytes()) == sha256):
        return target
    import httpx

    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    # Bounded like every read (agl.http.client): the pinned file is ~350 KB.
    limits = http.Limits(timeout_s=timeout_s, deadline_s=300.0, max_bytes=20_000_000)
    try:
        got = http.stream_to_file(url, tmp, limits,
                                  {"User-Agent": "agl (AGL1K benchmark pipeline)"})
    except (httpx.HTTPError, http.Refused) as exc:
        raise AglError(f"cannot fetch the AudioSet ontology from {url} ({exc}); "
                       f"place ontology.json in {cache_dir} or set tag.ontology") from None
    if got.status_code != 200:
        raise AglError(f"cannot fetch the AudioSet ontology from {url} (HTTP "
                       f"{got.status_code}); place ontology.json in {cache_dir} or set tag.ontology")
    if sha256 is not None and got.sha256 != sha256:
        tmp.unlink()
        raise AglError(f"{url}: SHA-256 differs from the pinned {sha256[:12]}...; not used")
    tmp.replace(target)
    return target


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tagger_classes() -> list[str]:
    """AudioSet's 527 tagger class ids in model output order (index = line number)."""
    text = resources.files("agl").joinpath("data/audioset_527.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def column_membership(ontology: Ontology, class_ids: Sequence[str]) -> dict[str, frozenset[str]]:
    """For each class id, the AGL1K columns it counts in."""
    return {c: ontology.columns_of(c) for c in class_ids}


def multi_root_classes(ontology: Ontology, class_ids: Sequence[str]) -> list[str]:
    """The classes among `class_ids` that reach more than one of the 7 roots."""
    return [c for c in class_ids if len(ontology.roots_of(c)) > 1]


def rollup(scores, membership: dict[str, frozenset[str]]):
    """Per-clip AGL1K column scores: the max over each column's classes.

    `scores`: a DataFrame, one row per clip, one column per class id (scores in [0, 1]).
    Returns a DataFrame with the 8 CATEGORY_COLUMNS, same index. A column that none of the
    scored classes reaches is NaN (not measured), never 0.
    """
    import numpy as np
    import pandas as pd

    unknown = [c for c in scores.columns if c not in membership]
    if unknown:
        raise AglError(f"class score column(s) {', '.join(unknown[:3])} have no ontology membership")
    out = pd.DataFrame(index=scores.index)
    for col in CATEGORY_COLUMNS:
        members = [c for c in scores.columns if col in membership[c]]
        out[col] = scores[members].max(axis=1) if members else np.nan
    return out
