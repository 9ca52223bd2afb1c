"""The page's data: the clip list as columns, the searchable text, and one clip's details.

Each is a plain JSON-able dict; `script` wraps one in the line the page loads as a script
(`AGL_EXPLORE.receive(name, data)`), which works the same served and from `file://`, where a
page may not fetch files. JSON is written ASCII-only, so no byte of model text can end the
script or change its encoding; the page puts every text into the DOM as text, never markup.

A clip's error band per run (BANDS, by code):
  0-4  the distance error in the report's bands (< 25, 25-200, 200-750, 750-2,500, >= 2,500 km)
  5    refused          the run declined (the protocol's refusal, whatever km it assigns)
  6    failed           no reply (the call failed)
  7    no distance      scored, but no coordinate to measure
  8    not scored       a prediction exists, but no score row (no score table, or the
                        protocol did not score the clip)
  9    no prediction    the run has no record for this clip
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from agl.core.geo import geodesic_km
from agl.core.jsonutil import jsonable
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.explore.sources import Explorer, Scored, Variant
from agl.report.plots import BAND_COLOURS, BAND_LABELS, ERROR_BANDS_KM
from agl.scoring.protocol_paper import paper_continent, paper_country
from agl.scoring.protocol_strict import iso3_many, strict_continent

REFUSED, FAILED, NO_DISTANCE, NOT_SCORED, NO_PREDICTION = 5, 6, 7, 8, 9
_EXTRA_BANDS = (("refused", "#7b4fa8"), ("failed", "#3d3d3d"), ("no distance", "#a0a0a0"),
                ("not scored", "#d0d0d0"), ("no prediction", "#ffffff"))
PRESENCE = 0.1  # the paper's threshold for a category (and speech) in a clip (agl.report.analysis)
RAW_REPLY_CHARS = 4000  # a reply without usable reasoning is shown, up to this long


def bands() -> list[dict[str, str]]:
    return ([{"label": lab, "colour": col} for lab, col in zip(BAND_LABELS, BAND_COLOURS, strict=True)]
            + [{"label": lab, "colour": col} for lab, col in _EXTRA_BANDS])


def script(name: str, data: Any) -> bytes:
    """One data file of the page: a single call the page's loader answers."""
    body = json.dumps(jsonable(data), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return f"AGL_EXPLORE.receive({json.dumps(name)},{body});\n".encode("ascii")


def _round(values: np.ndarray, digits: int = 1) -> list[float | None]:
    return [None if v != v else round(float(v), digits) for v in values]


def run_columns(result: Scored, keys: list[str]) -> dict[str, list]:
    """Band code, error km and wrong (1) / right (0) / unknown (-1) per clip, manifest order."""
    n = len(keys)
    has_pred = np.fromiter((k in result.predictions for k in keys), dtype=bool, count=n)
    if result.scores is None:
        codes = np.where(has_pred, NOT_SCORED, NO_PREDICTION)
        return {"band": codes.tolist(), "km": [None] * n, "wrong": [-1] * n}
    s = result.scores.reindex(keys)
    scored = s["status"].notna().to_numpy()
    km = s["distance_km"].to_numpy(dtype=float)
    codes = np.searchsorted(ERROR_BANDS_KM, np.nan_to_num(km, nan=0.0), side="right")
    codes = np.where(np.isnan(km), NO_DISTANCE, codes)
    codes = np.where(s["refused"].eq(True).to_numpy(), REFUSED, codes)
    codes = np.where(s["failed"].eq(True).to_numpy(), FAILED, codes)
    codes = np.where(scored, codes, np.where(has_pred, NOT_SCORED, NO_PREDICTION))
    wrong = result.wrong.reindex(keys)
    wrong_codes = np.where(wrong.isna().to_numpy(), -1, wrong.eq(True).to_numpy().astype(int))
    return {"band": codes.astype(int).tolist(), "km": _round(km), "wrong": wrong_codes.tolist()}


def _language(fields: dict[str, Any]) -> str:
    """The identified language, if the speech table names one (its first `*lang*` text)."""
    for name, value in fields.items():
        if "lang" in name.lower() and isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def aliases(manifest, protocol: str) -> dict[str, dict[str, str]]:
    """Other names of the manifest's countries and continents (lower case) -> its own name:
    the report's tables name groups as the protocol normalised them (paper: 'Turkey' for
    'Türkiye'; strict: ISO3 codes), and a link from there must still find the clips."""
    out: dict[str, dict[str, str]] = {"country": {}, "continent": {}}
    countries = sorted(set(manifest["country"].astype(str)) - {""})
    codes = iso3_many(countries) if protocol == "strict" else {}
    for name in countries:
        for alias in (paper_country(name), codes.get(name)):
            if alias:
                out["country"].setdefault(alias.lower(), name)
    for name in sorted(set(manifest["continent"].astype(str)) - {""}):
        for alias in (paper_continent(name), strict_continent(name)):
            if alias:
                out["continent"].setdefault(alias.lower(), name)
    return out


def index_payload(ex: Explorer) -> dict[str, Any]:
    """Everything the clip list filters and sorts on, as columns (one entry per clip)."""
    m = ex.manifest
    keys = m["key"].astype(str).tolist()
    cats = np.zeros(len(m), dtype=np.int64)
    for bit, col in enumerate(CATEGORY_COLUMNS):
        cats |= (m[col].fillna(0).to_numpy(dtype=float) >= PRESENCE).astype(np.int64) << bit
    birds = [-1] * len(keys)
    if ex.birds is not None:
        birds = [len(b["species"]) if (b := ex.birds.get(k)) and b["status"] == "ok" else -1
                 for k in keys]
    lang = [_language(ex.speech.get(k, {})) for k in keys] if ex.speech is not None else None
    runs = [run_columns(r.result, keys) for r in ex.runs]
    return {
        "dataset": ex.label,
        "protocol": ex.paths.protocol,
        "wrong_km": ex.paths.wrong_km,
        "notes": ex.notes,
        "bands": bands(),
        "categories": list(CATEGORY_COLUMNS),
        "aliases": aliases(m, ex.paths.protocol),
        "runs": [{"name": r.name, "notes": r.result.notes} for r in ex.runs],
        "variants": [{"id": v.id, "label": v.label, "clips": len(v.files),
                      "runs": sorted(v.listened)} for v in ex.variants],
        "birds_note": ex.birds_note,
        "speech_note": ex.speech_note,
        "variants_note": ex.variants_note,
        "clips": {
            "key": keys,
            "title": m["title"].tolist(),
            "continent": m["continent"].astype(str).tolist(),
            "country": m["country"].astype(str).tolist(),
            "seconds": _round(m["mp3seconds"].to_numpy(dtype=float)),
            "speech": (m["human_sounds"].fillna(0).to_numpy(dtype=float) >= PRESENCE).astype(int).tolist(),
            "cats": cats.tolist(),
            "birds": birds,
            "language": lang,
        },
        "band": [r["band"] for r in runs],
        "km": [r["km"] for r in runs],
        "wrong": [r["wrong"] for r in runs],
    }


def text_payload(ex: Explorer) -> dict[str, Any]:
    """Per clip, its title and every run's reasoning, for the list's free-text filter."""
    out = []
    for key, title in zip(ex.manifest["key"].astype(str), ex.manifest["title"], strict=True):
        parts = [title]
        for run in ex.runs:
            p = run.result.predictions.get(key)
            if p is not None and p.reasoning:
                parts.append(p.reasoning)
        out.append("\n".join(parts))
    return {"text": out}


# --- one clip -------------------------------------------------------------------------------


def _lookup(result: Scored, key: str) -> tuple[int, float | None, int]:
    """(band, km, wrong) of one clip; every key of the run is computed on first use."""
    if result.by_key is None:
        keys = sorted(set(result.predictions) | set(result.scores.index if result.scores is not None else ()))
        cols = run_columns(result, keys)
        result.by_key = dict(zip(keys, zip(cols["band"], cols["km"], cols["wrong"], strict=True), strict=True))
    return result.by_key.get(key, (NO_PREDICTION, None, -1))


def _guess(result: Scored, key: str, kind: str) -> dict[str, Any]:
    """What a run said about one clip, its score, and a note where something is missing."""
    band, km, wrong = _lookup(result, key)
    entry: dict[str, Any] = {"band": band, "km": km, "wrong": wrong}
    p = result.predictions.get(key)
    if p is None:
        entry["note"] = f"no prediction for this clip in this {kind}"
        return entry
    entry.update(status=p.status.value, latitude=p.latitude, longitude=p.longitude, city=p.city,
                 country=p.country, continent=p.continent, confidence=p.confidence,
                 reasoning=p.reasoning, refused=p.refused, error=p.error)
    if not (p.reasoning or "").strip() and p.raw_reply:
        entry["raw_reply"] = p.raw_reply[:RAW_REPLY_CHARS]
    if result.scores is None:
        entry["note"] = next((n for n in result.notes if n.startswith("not scored")),
                             "not scored: no usable score table")
    elif entry["band"] == NOT_SCORED:
        entry["note"] = "not scored: the protocol dropped this clip (no row in the score table)"
    return entry


def _media(ex: Explorer, n: int, vid: str, path, *, audio: bool,
           broken: dict[tuple[int, str], str]) -> dict[str, Any]:
    """The URLs of one version of a clip's sound and picture, or why there are none.
    `broken`: pictures that could not be drawn (the export draws them first), with why."""
    if not audio:
        return {"url": None, "spectrogram": None,
                "note": "audio not included in this export (exported with --audio none)"}
    if not path.is_file():
        return {"url": None, "spectrogram": None,
                "note": f"audio not present: {path} not found"}
    why = broken.get((n, vid))
    return {"url": f"media/{n}/{vid}{path.suffix.lower()}",
            "spectrogram": None if why else f"spec/{n}/{vid}.png",
            "spectrogram_note": f"no spectrogram: {why}" if why else None, "note": None}


def _moved_km(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    coords = (a.get("latitude"), a.get("longitude"), b.get("latitude"), b.get("longitude"))
    if any(c is None for c in coords):
        return None
    return round(float(geodesic_km(*(np.array([c], dtype=float) for c in coords))[0]), 1)


def variant_entry(ex: Explorer, v: Variant, n: int, key: str, original: dict[str, dict],
                  *, audio: bool, broken: dict[tuple[int, str], str]) -> dict[str, Any]:
    runs = []
    for run in ex.runs:
        heard = v.listened.get(run.name)
        if heard is None:
            runs.append({"run": run.name, "note": f"{run.name} did not listen to {v.label} "
                         f"(listen@{run.folder}-{v.intervention} not run)"})
            continue
        g = {"run": run.name, **_guess(heard, key, "counterfactual run")}
        g["moved_km"] = _moved_km(original.get(run.name, {}), g)
        before = original.get(run.name, {}).get("km")
        g["delta_km"] = None if before is None or g["km"] is None else round(g["km"] - before, 1)
        runs.append(g)
    return {"id": v.id, "label": v.label, "intervention": v.intervention, "level": v.level,
            "kind": v.kind, "measures": v.measures.get(key, {}), "notes": v.notes,
            "audio": _media(ex, n, v.id, v.files[key], audio=audio, broken=broken), "runs": runs}


def clip_payload(ex: Explorer, n: int, *, audio: bool = True,
                 broken: dict[tuple[int, str], str] | None = None) -> dict[str, Any]:
    """Everything the clip page shows about clip number `n` (manifest order)."""
    broken = broken or {}
    row = ex.manifest.iloc[n]
    key = str(row["key"])
    guesses = {r.name: {"run": r.name, **_guess(r.result, key, "run")} for r in ex.runs}
    variants = [variant_entry(ex, v, n, key, guesses, audio=audio, broken=broken)
                for v in ex.variants if key in v.files]
    variants_note = ex.variants_note
    if variants_note is None and not variants:
        sizes = sorted({len(v.files) for v in ex.variants})
        variants_note = ("this clip is not among the " + "/".join(map(str, sizes)) + " clips the "
                         "interventions were applied to (params counterfactual.subset)")
    birds = None
    if ex.birds is not None:
        birds = ex.birds.get(key) or {"status": "not listened", "species": [], "others": [],
                                      "error": "not in the BirdNET table (it listens only to "
                                               "clips that passed the filter)"}
    speech = None
    if ex.speech is not None:
        speech = ex.speech.get(key)
    return {
        "n": n,
        "key": key,
        "title": str(row["title"]),
        "description": str(row["description"]),
        "truth": {"latitude": float(row["latitude"]), "longitude": float(row["longitude"]),
                  "city": str(row["city"]), "country": str(row["country"]),
                  "continent": str(row["continent"])},
        "seconds": float(row["mp3seconds"]),
        "categories": {c: float(row[c]) for c in CATEGORY_COLUMNS if row[c] == row[c]},
        "audio": _media(ex, n, "original", ex.audio_path(n), audio=audio, broken=broken),
        "runs": list(guesses.values()),
        "variants": variants,
        "variants_note": variants_note,
        "birds": birds,
        "birds_note": ex.birds_note,
        "speech": speech,
        "speech_note": ex.speech_note if ex.speech is None else (
            None if speech else "not in the speech table"),
    }


def media_files(ex: Explorer, n: int) -> dict[str, Any]:
    """The files a clip's page may ask for, by the name in its URL: `original<ext>` and
    `<variant id><ext>`; the spectrograms are `<the same stem>.png`."""
    key = str(ex.manifest.iloc[n]["key"])
    found = {"original": ex.audio_path(n)}
    found.update({v.id: v.files[key] for v in ex.variants if key in v.files})
    return found
