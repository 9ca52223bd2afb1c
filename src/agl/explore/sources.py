"""What the pipeline wrote, read once for the explorer; every part that is absent is a note.

Only the manifest is required (without it there are no clips to show). Everything else is
read if it is there, and where it is not, or cannot be read, the explorer says so in place:
a run folder without its score table, a clip whose audio is missing, an intervention no run
listened to. Nothing here raises for a missing optional part.

Where things are (the pipeline's layout; `agl explore` takes each as an option):
  manifest            data/manifest.csv, audio under data/audio/<key>/<mp3name>
  runs                build/runs/<run>/ and build/paper/<run>/: predictions.jsonl, and
                      scores_<protocol>.csv from the evaluate (or paper) stage
  birds               build/curation/birds.csv (+ birds_detections.jsonl beside it)
  speech              build/curation/speech.csv: any table with a `key` column; its other
                      columns are shown as they are (the speech stage's fields)
  perturb             build/perturb/<intervention>/<level>/ (manifest.csv, audio/, perturb.csv)
  listen              build/listen/<run folder>/<intervention>/<level>/ (predictions, scores)
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core.tables import read_whole_csv
from agl.dataset.manifest import ManifestWarning, dataset_label, load_manifest
from agl.errors import AglError
from agl.judges.modes import is_wrong
from agl.predictions.records import read_predictions

# The score table's columns the explorer reads (agl.scoring.score_table.SCORE_COLUMNS has them all).
SCORE_NEEDS = ("sample_id", "status", "distance_km", "refused", "failed", "country_correct",
               "pred_lat", "pred_lon")
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+|\.{2,}")


@dataclass(frozen=True)
class ExplorePaths:
    """Where each of the pipeline's outputs is (None: not read), and how to judge a run."""

    manifest: Path = Path("data/manifest.csv")
    audio_root: Path | None = None  # None: 'audio' beside the manifest
    run_roots: tuple[Path, ...] = (Path("build/runs"), Path("build/paper"))
    birds: Path | None = Path("build/curation/birds.csv")
    speech: Path | None = Path("build/curation/speech.csv")
    perturb: Path | None = Path("build/perturb")
    listen: Path | None = Path("build/listen")
    protocol: str = "paper"
    # "Wrong" as the report's error modes define it (params report.wrong_km): refused, failed,
    # or the wrong country; where the protocol does not score the country, farther than this.
    wrong_km: float = 750.0

    @property
    def audio(self) -> Path:
        return self.audio_root if self.audio_root is not None else self.manifest.parent / "audio"


@dataclass
class Scored:
    """One run's predictions and score table (on the original clips or on one variant)."""

    predictions: dict[str, Any]
    scores: pd.DataFrame | None  # indexed by sample_id; None: no usable table
    wrong: pd.Series | None  # bool by sample_id (agl.judges.modes.is_wrong)
    notes: list[str] = field(default_factory=list)
    # key -> (band, km, wrong), filled once by agl.explore.payload: a clip page reads a few
    # keys of every run, and a pandas lookup per key and run would cost ~3 ms each.
    by_key: dict[str, tuple[int, float | None, int]] | None = None


@dataclass
class Run:
    name: str  # as the report names it (metrics.json `run`, else the folder)
    folder: str  # the folder's own name: listen/<folder>/ holds its counterfactual runs
    path: Path
    result: Scored


@dataclass
class Variant:
    """One level of one intervention: a derived copy of some clips."""

    id: str  # URL-safe: names its audio and spectrogram files
    intervention: str
    level: str
    kind: str
    files: dict[str, Path]  # key -> derived audio file
    measures: dict[str, dict[str, Any]]  # key -> its perturb.csv row
    listened: dict[str, Scored]  # run name -> that run on this variant
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.intervention if self.level == "default" else f"{self.intervention} · {self.level}"


@dataclass
class Explorer:
    paths: ExplorePaths
    manifest: pd.DataFrame
    label: str
    notes: list[str]
    runs: list[Run]
    birds: dict[str, dict[str, Any]] | None
    birds_note: str | None
    speech: dict[str, dict[str, Any]] | None
    speech_note: str | None
    variants: list[Variant]
    variants_note: str | None

    def audio_path(self, n: int) -> Path:
        row = self.manifest.iloc[n]
        return self.paths.audio / str(row["key"]) / str(row["mp3name"])


def slug(text: str) -> str:
    """A name safe in a URL and as a file name: letters, digits, '_', '-', single dots."""
    return _SLUG.sub("_", text).strip("_.") or "x"


def load(paths: ExplorePaths) -> Explorer:
    """Read everything there is; AglError only for an unusable manifest."""
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manifest = load_manifest(paths.manifest)
    notes += [str(w.message) for w in caught]  # they name the file
    if manifest.empty:
        raise AglError(f"{paths.manifest}: the manifest has no clips to explore")
    for col in ("title", "description"):
        if col not in manifest:
            manifest[col] = ""
        manifest[col] = manifest[col].fillna("").astype(str)
    if not paths.audio.is_dir():
        notes.append(f"audio not present: {paths.audio} not found, so no clip can be played; "
                     "guesses and reasoning are shown without sound (`agl download` fetches it)")
    keys = set(manifest["key"])
    runs = find_runs(paths, keys, notes)
    birds, birds_note = read_birds(paths.birds)
    speech, speech_note = read_speech(paths.speech)
    variants, variants_note = find_variants(paths, runs)
    return Explorer(paths, manifest, dataset_label(manifest), notes, runs, birds, birds_note,
                    speech, speech_note, variants, variants_note)


# --- runs -------------------------------------------------------------------------------------


def find_runs(paths: ExplorePaths, keys: set[str], notes: list[str]) -> list[Run]:
    """Every `<root>/<run>/predictions.jsonl`, in root then name order."""
    runs: list[Run] = []
    seen: set[str] = set()
    for root in paths.run_roots:
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if (p / "predictions.jsonl").is_file()):
            name = _run_name(folder)
            if name in seen:  # two roots with the same run name: keep both, tell them apart
                name = f"{root.name}/{folder.name}"
            seen.add(name)
            result = read_scored(folder, paths.protocol, paths.wrong_km, keys,
                                 evaluate_hint=f"dvc repro evaluate@{folder.name}")
            runs.append(Run(name, folder.name, folder, result))
    if not runs:
        where = ", ".join(str(r) for r in paths.run_roots)
        notes.append(f"no runs: no <run>/predictions.jsonl under {where}; the clips are listed "
                     "without guesses (run `dvc repro` or pass --runs)")
    return runs


def _run_name(folder: Path) -> str:
    try:
        doc = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        name = doc.get("run") if isinstance(doc, dict) else None
        return str(name) if isinstance(name, str) and name.strip() else folder.name
    except (OSError, ValueError):
        return folder.name


def read_scored(folder: Path, protocol: str, wrong_km: float, keys: set[str], *,
                evaluate_hint: str) -> Scored:
    """The predictions and the score table of one folder, with one note per problem."""
    notes: list[str] = []
    preds: dict[str, Any] = {}
    pred_path = folder / "predictions.jsonl"
    if pred_path.is_file():
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                preds = read_predictions(pred_path)
            notes += [str(w.message) for w in caught]
        except AglError as exc:
            notes.append(f"predictions unreadable: {exc}")
    else:
        notes.append(f"{pred_path} not found")
    foreign = [k for k in preds if k not in keys]
    if foreign:
        notes.append(f"{len(foreign)} prediction(s) name clips not in the manifest (first: "
                     f"{foreign[0]}); they are not shown")
    scores = wrong = None
    score_path = folder / f"scores_{protocol}.csv"
    if not score_path.is_file():
        notes.append(f"not scored: {score_path} not found, so no error km or band; guesses "
                     f"are shown as given (run `{evaluate_hint}`)")
    else:
        try:
            scores = _read_scores(score_path)
            wrong = is_wrong(scores, wrong_km=wrong_km)
            unscored = [k for k in preds if k not in scores.index]
            if unscored:  # a short table: the clips it lacks show no error, and say so
                notes.append(f"{len(preds) - len(unscored)} of {len(preds)} clips have scores "
                             f"in {score_path} (first without: {unscored[0]}); re-run "
                             f"`{evaluate_hint}`")
        except AglError as exc:
            notes.append(str(exc))
            scores = None
    return Scored(preds, scores, wrong, notes)


def _read_scores(path: Path) -> pd.DataFrame:
    frame = read_whole_csv(path, "re-run the evaluate stage", dtype={"sample_id": str},
                           low_memory=False)
    missing = [c for c in SCORE_NEEDS if c not in frame.columns]
    if missing:
        raise AglError(f"{path}: not a score table (no column {', '.join(missing)}); re-run "
                       "the evaluate stage")
    for col in ("refused", "failed"):
        frame[col] = frame[col].astype(str).str.lower().eq("true")
    for col in ("distance_km", "country_correct", "pred_lat", "pred_lon"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    frame = frame.drop_duplicates("sample_id", keep="last").set_index("sample_id")
    return frame


# --- birds and speech -------------------------------------------------------------------------


def _cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v.item() if hasattr(v, "item") else v


def _read_table(path: Path) -> tuple[pd.DataFrame | None, str | None]:
    """A curation table, keys as text and empty cells empty; or None and the one line why not."""
    try:
        return pd.read_csv(path, dtype={"key": str}, keep_default_na=False, na_values=[""]), None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        return None, f"{path}: unreadable ({str(exc).splitlines()[0][:120]})"


def read_birds(path: Path | None) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
    """BirdNET per clip: status, species and other classes with confidences."""
    if path is None:
        return None, "BirdNET: not read (--birds none)"
    if not path.is_file():
        return None, f"BirdNET stage not run: {path} not found (`dvc repro birds`)"
    table, unreadable = _read_table(path)
    if table is None:
        return None, unreadable
    if "key" not in table.columns or "status" not in table.columns:
        return None, f"{path}: not a BirdNET table (needs columns key and status)"
    birds: dict[str, dict[str, Any]] = {}
    for row in table.to_dict(orient="records"):
        species = [s for s in str(_cell(row.get("species")) or "").split("; ") if s]
        others = [s for s in str(_cell(row.get("other_classes")) or "").split("; ") if s]
        birds[str(row["key"])] = {
            "status": str(row["status"]), "error": _cell(row.get("error")) or None,
            "species": [{"scientific": s} for s in species],
            "others": [{"scientific": s} for s in others],
        }
    detections = path.with_name("birds_detections.jsonl")
    if detections.is_file():  # names, confidences and seconds for each detection
        try:
            for line in detections.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line) if line.strip() else None
                if isinstance(rec, dict) and str(rec.get("key")) in birds:
                    found = [d for d in rec.get("detections") or [] if isinstance(d, dict)]
                    entry = birds[str(rec["key"])]
                    entry["species"] = [d for d in found if d.get("kind") == "species"]
                    entry["others"] = [d for d in found if d.get("kind") != "species"]
        except (OSError, ValueError):
            pass  # the table's names stand; the confidences are only a detail
    return birds, None


def read_speech(path: Path | None) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
    """The speech stage's table, keyed by clip: its columns are shown as they are."""
    if path is None:
        return None, "speech stage: not read (--speech none)"
    if not path.is_file():
        return None, f"speech stage not run: {path} not found (no identified language)"
    table, unreadable = _read_table(path)
    if table is None:
        return None, unreadable
    if "key" not in table.columns:
        return None, f"{path}: no `key` column; cannot tell which clip a row describes"
    speech = {}
    for row in table.to_dict(orient="records"):
        speech[str(row.pop("key"))] = {k: _cell(v) for k, v in row.items() if _cell(v) is not None}
    return speech, None


# --- counterfactual variants ------------------------------------------------------------------


def find_variants(paths: ExplorePaths, runs: list[Run]) -> tuple[list[Variant], str | None]:
    """Every `<perturb>/<intervention>/<level>/` and each run's answers on it."""
    root = paths.perturb
    if root is None:
        return [], "counterfactual variants: not read (--perturb none)"
    if not root.is_dir():
        return [], f"no perturbation run: {root} not found (`dvc repro perturb` derives them)"
    variants: list[Variant] = []
    ids: set[str] = set()
    for level_dir in sorted(root.glob("*/*/manifest.csv")):
        level_dir = level_dir.parent
        intervention, level = level_dir.parent.name, level_dir.name
        notes: list[str] = []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ManifestWarning)
                derived = load_manifest(level_dir / "manifest.csv")
        except AglError as exc:
            variants.append(Variant(_unique(slug(f"{intervention}.{level}"), ids), intervention,
                                    level, "", {}, {}, {}, [f"derived dataset unreadable: {exc}"]))
            continue
        files = {str(r.key): level_dir / "audio" / str(r.key) / str(r.mp3name)
                 for r in derived.itertuples(index=False)}
        variant = Variant(_unique(slug(f"{intervention}.{level}"), ids), intervention, level,
                          _kind(root / f"{intervention}.json", intervention), files,
                          _measures(level_dir / "perturb.csv"), {}, notes)
        for run in runs:
            listen = (paths.listen / run.folder / intervention / level) if paths.listen else None
            if listen is None or not (listen / "predictions.jsonl").is_file():
                continue
            variant.listened[run.name] = read_scored(
                listen, paths.protocol, paths.wrong_km, set(files),
                evaluate_hint=f"dvc repro listen@{run.folder}-{intervention}")
        variants.append(variant)
    if not variants:
        return [], f"no perturbation run: no <intervention>/<level>/manifest.csv under {root}"
    return variants, None


def _unique(name: str, taken: set[str]) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}-{n}", n + 1
    taken.add(out)
    return out


def _kind(summary: Path, fallback: str) -> str:
    try:
        doc = json.loads(summary.read_text(encoding="utf-8"))
        return str(doc.get("kind") or fallback) if isinstance(doc, dict) else fallback
    except (OSError, ValueError):
        return fallback


def _measures(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    try:
        table = pd.read_csv(path, dtype={"key": str})
    except (OSError, ValueError, pd.errors.ParserError):
        return {}
    if "key" not in table.columns:
        return {}
    return {str(r.pop("key")): {k: _cell(v) for k, v in r.items()}
            for r in table.to_dict(orient="records")}
