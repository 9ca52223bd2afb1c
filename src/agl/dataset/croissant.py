"""`data/croissant.json`: the dataset folder described in MLCommons Croissant 1.0 (JSON-LD),
the metadata Hugging Face, Kaggle and OpenML read.

It describes what `agl download` leaves in the folder: `manifest.csv` (one record per clip:
its fields and their types, the record set `clips`), the audio files `audio/<key>/<mp3name>`
and `lock.json` (each clip's size and SHA-256), with the licence, the checksums of the
manifest and lock, the published header's defect and how this project repairs it, and, for
the demo set, that every clip is synthetic. Written from the folder's own bytes only (no date,
no path), so the same folder gives the same card and `data.dvc` stays put.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import diskwrite
from agl.dataset.manifest import COLUMNS, MERGED_CATEGORY, SYNTHETIC_MARK

CARD = "croissant.json"
CONFORMS = "http://mlcommons.org/croissant/1.0"
AGL1K_URL = "https://github.com/Rising0321/AGL1K"
# The Aporee recordings' licence on the Internet Archive (CC BY-NC-SA), the manifest's
# release terms; the synthetic demo set is this project's (MIT).
AGL1K_LICENSE = "https://creativecommons.org/licenses/by-nc-sa/4.0/"
DEMO_LICENSE = "https://opensource.org/license/mit"
FLOATS = {"longitude", "latitude", "mp3seconds", "human_sounds", "animal", "music", "natural_sounds",
          "channel", "environment_and_background", "sounds_of_things", "source_ambiguous_sounds"}
DESCRIBE = {
    "key": "Internet Archive item of the recording (aporee_<id>_<id>); audio at audio/<key>/<mp3name>",
    "short_key": "the recording's short id", "longitude": "true longitude, WGS-84 degrees",
    "latitude": "true latitude, WGS-84 degrees", "altitude": "altitude as published (text; may be empty)",
    "description": "the recordist's description", "title": "the recording's title",
    "mp3name": "audio file name inside audio/<key>/", "mp3seconds": "duration in seconds",
    "city": "true city", "country": "true country",
    "continent": "true continent (AGL1K leaves it empty for its 6 Vatican City rows)",
}
HEADER_REPAIR = (
    "The published AGL1K manifest (data/geoLocalization_schema.csv, commit ab53ad0) has a header "
    f"of 19 names for 20 fields: '{MERGED_CATEGORY}' stands for two columns, 'channel' and "
    "'environment_and_background', so a plain CSV reader shifts every column from there on by one. "
    "agl.dataset.manifest detects exactly that shape, splits the name in two (with a warning) and "
    "refuses any other mismatch; this manifest.csv is the repaired file, 20 names for 20 fields."
)


CITATION = ("@misc{agl1k, title={The Sonar Moment: AGL1K, an audio geo-localization benchmark}, "
            "year={2026}, howpublished={https://github.com/Rising0321/AGL1K}}")


def _version(lock: Path) -> str:
    """The demo set's version: its generator's seed (lock.json's source), as semver."""
    try:
        seed = json.loads(lock.read_text(encoding="utf-8"))["source"]["seed"]
    except (OSError, ValueError, KeyError, TypeError):
        return "0.0.0"
    return f"0.0.{int(seed)}" if str(seed).isdigit() else "0.0.0"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _field(column: str) -> dict[str, Any]:
    what = DESCRIBE.get(column) or f"share of the clip's sound in the AudioSet root '{column}' (0-1)"
    if column in ("channel", "environment_and_background"):
        what += f"; published merged under one header name, '{MERGED_CATEGORY}' (repaired)"
    return {"@type": "cr:Field", "@id": f"clips/{column}", "name": column, "description": what,
            "dataType": "sc:Float" if column in FLOATS else "sc:Text",
            "source": {"fileObject": {"@id": "manifest.csv"}, "extract": {"column": column}}}


def card(folder: Path) -> dict[str, Any]:
    """The Croissant JSON-LD of a dataset folder (manifest.csv, lock.json, audio/)."""
    manifest, lock = folder / "manifest.csv", folder / "lock.json"
    frame = pd.read_csv(manifest, dtype=str, keep_default_na=False)
    synthetic = bool(len(frame)) and frame["title"].str.startswith(SYNTHETIC_MARK).all()
    n = len(frame)
    if synthetic:
        name, about = "AGL1K synthetic demo", (
            f"SYNTHETIC: {n} generated clips (agl.dataset.demo), not field recordings; each is "
            "labelled with a real place only to exercise the pipeline, so scores on it say nothing "
            "about a model. Same layout as AGL1K.")
    else:
        name, about = "AGL1K", (
            f"AGL1K audio geo-localization benchmark: {n} Aporee field recordings (Internet "
            "Archive) with their true place (coordinates, city, country, continent) and the share "
            "of each AudioSet root in the clip.")
    distribution: list[dict[str, Any]] = [
        {"@type": "cr:FileObject", "@id": "manifest.csv", "name": "manifest.csv",
         "contentUrl": "manifest.csv", "encodingFormat": "text/csv", "sha256": _sha256(manifest),
         "description": f"One row per clip ({n}). {HEADER_REPAIR}"},
        {"@type": "cr:FileSet", "@id": "audio", "name": "audio", "encodingFormat": "audio/mpeg",
         "includes": "audio/*/*.mp3",
         "description": "the clips, audio/<key>/<mp3name>; each file's size and SHA-256 are in lock.json"},
    ]
    if lock.is_file():
        distribution.append({"@type": "cr:FileObject", "@id": "lock.json", "name": "lock.json",
                             "contentUrl": "lock.json", "encodingFormat": "application/json",
                             "sha256": _sha256(lock),
                             "description": "size and SHA-256 of every audio file, checked by agl download"})
    return {
        "@context": CONTEXT, "@type": "sc:Dataset", "dct:conformsTo": CONFORMS,
        "name": name, "description": about, "license": DEMO_LICENSE if synthetic else AGL1K_LICENSE,
        "url": AGL1K_URL, "keywords": ["audio", "geolocation", "benchmark"] + (["synthetic"] if synthetic else []),
        "isLiveDataset": False, "citeAs": CITATION,
        "version": _version(lock) if synthetic else "1.0.0",
        "distribution": distribution,
        "recordSet": [{"@type": "cr:RecordSet", "@id": "clips", "name": "clips", "key": {"@id": "clips/key"},
                       "description": f"one record per clip: {n} records",
                       "field": [_field(c) for c in COLUMNS if c in frame.columns]}],
    }


def write_card(folder: Path) -> Path:
    """Write `folder/croissant.json` (unchanged bytes are not rewritten)."""
    path = Path(folder) / CARD
    text = json.dumps(card(Path(folder)), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        diskwrite.write_text(path, text)
    return path


# The Croissant 1.0 context (the spec's, section "Dataset-level information").
CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/", "citeAs": "cr:citeAs", "column": "cr:column",
    "conformsTo": "dct:conformsTo", "cr": "http://mlcommons.org/croissant/", "data": {"@id": "cr:data",
    "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"}, "dct": "http://purl.org/dc/terms/",
    "examples": {"@id": "cr:examples", "@type": "@json"}, "extract": "cr:extract", "field": "cr:field",
    "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject", "fileSet": "cr:fileSet",
    "format": "cr:format", "includes": "cr:includes", "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath", "key": "cr:key", "md5": "cr:md5", "parentField": "cr:parentField",
    "path": "cr:path", "rai": "http://mlcommons.org/croissant/RAI/", "recordSet": "cr:recordSet",
    "references": "cr:references", "regex": "cr:regex",
    "repeated": "cr:repeated", "replace": "cr:replace", "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/", "equivalentProperty": "cr:equivalentProperty",
    "separator": "cr:separator", "source": "cr:source", "subField": "cr:subField", "transform": "cr:transform",
}
