"""What this project's own listeners heard in each clip, from the curation stages' tracked
outputs (no second listen): the cascade's stage one (agl.backends.cascade).

Per clip, from a curation folder (params.yaml `models: <name>: settings: perception`,
default build/curation):

* speech.csv (the speech stage: Silero VAD + Whisper language ID): seconds of speech, the
  language with its probability, the other candidates; speech_windows.jsonl: the transcript
  where the stage ran with `speech.transcribe: true`; speech_summary.json: which Whisper;
* birds.csv + birds_detections.jsonl (BirdNET): each species and non-bird class heard, with
  its best window's confidence;
* tags.csv (the tag stage): the 8 AudioSet root categories with their scores (the tagger's
  527 class ids in tags_classes.csv are not named here: their names live in the ontology,
  which only the curation floor reads);
* the duration the stages measured (else the manifest's mp3seconds).

Nothing else: never the clip's key, file name, title, description or the file's metadata tags.
A clip a table holds no row for, or one the stage could not read, is reported as "not
available" in that line: the model is told what is missing, never given a guess.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agl.core.tables import read_whole_csv
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError

REQUIRED = ("speech.csv", "birds.csv", "tags.csv")
OPTIONAL = ("speech_windows.jsonl", "birds_detections.jsonl", "speech_summary.json")


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and v != v) else str(v).strip()


def _jsonl(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return out
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            raise AglError(f"{path}: line {i}: not valid JSON; rebuild it with its curation "
                           "stage (dvc repro -f)") from None
        if isinstance(doc, dict) and isinstance(doc.get("key"), str):
            out[doc["key"]] = doc
    return out


@dataclass
class Perception:
    """The curation folder's tables, indexed by clip key."""

    folder: Path
    speech: dict[str, dict[str, Any]]
    birds: dict[str, dict[str, Any]]
    tags: dict[str, dict[str, Any]]
    windows: dict[str, dict[str, Any]]
    detections: dict[str, dict[str, Any]]
    whisper: str
    max_transcript_chars: int

    def report(self, key: str, manifest_seconds: float | None) -> dict[str, Any]:
        """One clip's report as data (kept in its prediction under `perception`)."""
        sp, bd, tg = self.speech.get(key), self.birds.get(key), self.tags.get(key)
        seconds = next((s for s in (_num((sp or {}).get("seconds")), _num((tg or {}).get("seconds")),
                                    manifest_seconds) if s is not None), None)
        return {"duration_s": round(seconds, 1) if seconds is not None else None,
                "speech": self._speech(key, sp), "birds": self._birds(key, bd),
                "categories": self._categories(key, tg)}

    def _speech(self, key: str, row: dict[str, Any] | None) -> dict[str, Any]:
        if row is None or _text(row.get("status")) not in ("ok", "uncertain", "no_speech"):
            return {"available": False, "status": _text((row or {}).get("status")) or "no row"}
        out: dict[str, Any] = {"available": True, "model": self.whisper,
                               "speech_seconds": _num(row.get("speech_seconds"))}
        if row["status"] == "ok":
            out["language"] = _text(row.get("language_name")) or _text(row.get("language"))
            out["language_code"] = _text(row.get("language"))
            out["probability"] = _num(row.get("language_probability"))
        elif row["status"] == "uncertain":
            out["language"] = None
            out["candidates"] = _text(row.get("candidates"))
        doc = self.windows.get(key) or {}
        transcript = doc.get("transcript")
        if isinstance(transcript, list):
            transcript = " ".join(str(t) for t in transcript)
        if isinstance(transcript, str) and transcript.strip():
            text = " ".join(transcript.split())
            out["transcript"] = text[: self.max_transcript_chars]
        return out

    def _birds(self, key: str, row: dict[str, Any] | None) -> dict[str, Any]:
        if row is None or _text(row.get("status")) != "ok":
            return {"available": False, "status": _text((row or {}).get("status")) or "no row"}
        found = (self.detections.get(key) or {}).get("detections")
        if isinstance(found, list):
            heard = [{"name": f"{d.get('common') or ''} ({d.get('scientific')})".strip(),
                      "kind": d.get("kind"), "confidence": _num(d.get("max_confidence"))}
                     for d in found if isinstance(d, dict)]
        else:  # the table alone: species by name, no confidence but the top one's
            names = [s.strip() for s in _text(row.get("species")).split(";") if s.strip()]
            heard = [{"name": n, "kind": "species", "confidence": None} for n in names]
        return {"available": True, "heard": heard}

    def _categories(self, key: str, row: dict[str, Any] | None) -> dict[str, Any]:
        if row is None or _text(row.get("status")) != "ok":
            return {"available": False, "status": _text((row or {}).get("status")) or "no row"}
        scores = {c: round(x, 2) for c in CATEGORY_COLUMNS
                  if (x := _num(row.get(c))) is not None}
        return {"available": True, "tagger": _text(row.get("tagger")), "scores": scores}


def load(folder: str | Path, max_transcript_chars: int = 2000) -> Perception:
    """The curation tables in `folder`; one line naming a missing required one."""
    folder = Path(folder)
    for name in REQUIRED:
        if not (folder / name).is_file():
            raise AglError(f"cascade backend: {folder / name} is missing: the cascade reads what "
                           f"the curation stages heard; run them first (dvc repro speech birds "
                           f"tag) or point the setting `perception` at their folder")
    rerun = "rebuild it with its curation stage (dvc repro -f)"

    def rows(name: str) -> dict[str, dict[str, Any]]:
        frame = read_whole_csv(folder / name, rerun, dtype={"key": str}, keep_default_na=False,
                               na_values=[""])
        if "key" not in frame:
            raise AglError(f"{folder / name}: no key column; {rerun}")
        return {str(r["key"]): r for r in frame.to_dict("records")}

    whisper = ""
    if (folder / "speech_summary.json").is_file():
        try:
            model = json.loads((folder / "speech_summary.json").read_text(encoding="utf-8")).get("model")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            model = None
        whisper = str(model.get("name") or "") if isinstance(model, dict) else ""
    return Perception(folder, rows("speech.csv"), rows("birds.csv"), rows("tags.csv"),
                      _jsonl(folder / "speech_windows.jsonl"), _jsonl(folder / "birds_detections.jsonl"),
                      whisper, max_transcript_chars)


def digest(folder: str | Path) -> str | None:
    """The SHA-256 of every table the report reads (None when a required one is missing): a
    run's records are kept across reruns only while it is unchanged."""
    folder = Path(folder)
    h = hashlib.sha256()
    for name in (*REQUIRED, *OPTIONAL):
        path = folder / name
        if not path.is_file():
            if name in REQUIRED:
                return None
            continue
        h.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f}"


def render(report: dict[str, Any]) -> str:
    """The report as the lines the text model reads."""
    lines = []
    d = report.get("duration_s")
    lines.append(f"- Length: {d:.1f} s." if d is not None else "- Length: unknown.")
    sp = report["speech"]
    if not sp["available"]:
        lines.append(f"- Speech (Whisper): not available ({sp['status']}).")
    else:
        secs = sp.get("speech_seconds")
        heard = f"{secs:.1f} s of speech" if secs is not None else "speech time unknown"
        if sp.get("language"):
            lines.append(f"- Speech (Whisper {sp.get('model') or ''}): {heard}; language "
                         f"{sp['language']} ({sp.get('language_code')}), probability "
                         f"{_pct(sp.get('probability'))}.".replace("Whisper )", "Whisper)"))
        elif "candidates" in sp:
            lines.append(f"- Speech (Whisper): {heard}; no language likely enough (candidates: "
                         f"{sp['candidates'] or 'none'}).")
        else:
            lines.append(f"- Speech (Whisper): {heard}; too little to identify a language.")
        if sp.get("transcript"):
            lines.append(f"- Transcript of the speech: \"{sp['transcript']}\"")
        else:
            lines.append("- Transcript of the speech: none.")
    bd = report["birds"]
    if not bd["available"]:
        lines.append(f"- Birds and other animals (BirdNET): not available ({bd['status']}).")
    else:
        species = [b for b in bd["heard"] if b.get("kind") != "other"]
        other = [b for b in bd["heard"] if b.get("kind") == "other"]
        fmt = "; ".join(f"{b['name']} {_pct(b['confidence'])}" for b in species)
        lines.append(f"- Birds and other animals (BirdNET, confidence): {fmt or 'none detected'}.")
        if other:
            lines.append("- Other sounds (BirdNET): "
                         + "; ".join(f"{b['name']} {_pct(b['confidence'])}" for b in other) + ".")
    cat = report["categories"]
    if not cat["available"]:
        lines.append(f"- Sound categories (AudioSet): not available ({cat['status']}).")
    else:
        scores = cat["scores"]  # in the manifest's column order, however the record sorted them
        fmt = ", ".join(f"{c.replace('_', ' ')} {scores[c]:.2f}" for c in CATEGORY_COLUMNS if c in scores)
        lines.append(f"- Sound categories (AudioSet roots, score 0-1): {fmt or 'none'}.")
    return "\n".join(lines)
