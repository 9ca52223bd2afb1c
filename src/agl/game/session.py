"""One player's game: which clip comes next, checking a guess, and writing it as a prediction.

A person's guesses are a model run like any other: `build/runs/human-<player>/predictions.jsonl`
in the predictions format, with `meta.backend = "human"` and `meta.model = <player>`. Each
guess is appended and fsync'd before the page learns the answer, so closing the browser or
killing the server loses nothing; a restarted game reads the file and continues at the first
clip without a finished record. A skip is a refusal (status `refused`).

Nothing that depends on the true place leaves this module before that clip has a record.
"""

from __future__ import annotations

import math
import random
import re
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agl.core.diskwrite import DiskError, replace_atomically
from agl.core.geo import geodesic_km, geoscore
from agl.core.jsonutil import dumps
from agl.core.worldmap import great_circle
from agl.dataset.manifest import Clip
from agl.errors import AglError
from agl.predictions.records import PLACE_FIELDS, Prediction, PredictionWriter, Status, read_predictions

BACKEND = "human"
CONTINENTS = ("Africa", "Antarctica", "Asia", "Europe", "North America", "Oceania", "South America")
SUMMARY = "run_summary.json"
TEXT_LIMIT = 100  # characters for a typed city or country
_PLAYER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_GUESS_FIELDS = {"clip_id", "latitude", "longitude", "city", "country", "continent", "listened_s"}
_SKIP_FIELDS = {"clip_id", "listened_s"}


class RequestError(Exception):
    """A request the game refuses; `status` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Guess:
    """A validated guess from the page."""

    clip_id: str
    latitude: float
    longitude: float
    city: str | None
    country: str | None
    continent: str | None
    listened_s: float | None


def check_player(name: str) -> str:
    """`name` when it is a safe player name (it names the run folder), else one-line AglError."""
    if not _PLAYER_NAME.match(name or ""):
        raise AglError(
            f"player name {name!r}: use 1-40 letters, digits, '_', '-' or '.', starting with "
            "a letter or digit (it names the run folder human-<player>)"
        )
    return name


def run_name(player: str) -> str:
    """The run folder and MLflow run name of a player's games: `human-<player>`."""
    return f"human-{player}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class GameSession:
    """The state of one player's run. Thread-safe: the server handles requests in threads."""

    def __init__(
        self,
        clips: list[Clip],
        audio_root: Path,
        player: str,
        run_dir: Path,
        done: dict[str, Prediction],
        writer: PredictionWriter,
    ):
        self.clips = clips
        self.by_id = {c.key: c for c in clips}
        self.audio_root = audio_root
        self.player = player
        self.run_dir = run_dir
        self.done = done
        self._writer = writer
        self._presented: dict[str, float] = {}
        self._scores: dict[str, tuple[float | None, float]] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        clips: list[Clip],
        audio_root: Path,
        player: str,
        run_dir: Path,
        order_seed: int | None = None,
    ) -> GameSession:
        """Check the audio is there, read what the player already answered, open the run."""
        check_player(player)
        if not clips:
            raise AglError("the manifest has no clips to play")
        missing = [c for c in clips if not (audio_root / c.relpath).is_file()]
        if missing:
            raise AglError(
                f"{len(missing)} of {len(clips)} clips have no audio under {audio_root} "
                f"(first: {audio_root / missing[0].relpath}); pass --audio-root with the "
                "folder that holds <key>/<mp3name>, or fetch the audio first"
            )
        order = list(clips)
        if order_seed is not None:
            random.Random(order_seed).shuffle(order)
        path = run_dir / "predictions.jsonl"
        done: dict[str, Prediction] = {}
        if path.exists():
            done = {k: p for k, p in read_predictions(path).items() if p.finished}
            keys = {c.key for c in clips}
            foreign = [k for k in done if k not in keys]
            if foreign:
                raise AglError(
                    f"{path}: {len(foreign)} answered clip(s) are not in this manifest "
                    f"(first: {foreign[0]}); this run was played on another manifest — "
                    "pass --out with a new folder or --player with another name"
                )
        return cls(order, audio_root, player, run_dir, done, PredictionWriter(path))

    @property
    def predictions_path(self) -> Path:
        return self._writer.path

    def close(self) -> None:
        with self._lock:  # never cut a record that a request thread is writing
            self._writer.close()

    # --- what the page may see -------------------------------------------------------------

    def _current(self) -> Clip | None:
        return next((c for c in self.clips if c.key not in self.done), None)

    def state(self, present: bool = True) -> dict[str, Any]:
        """Progress, score and the clip to play: its id, number and length, never its place.

        `present` marks the clip as shown to the player now (the start of its latency_s).
        """
        with self._lock:
            clip = self._current()
            current = None
            if clip is not None:
                if present:
                    self._presented.setdefault(clip.key, time.monotonic())
                current = {
                    "clip_id": clip.key,
                    "number": len(self.done) + 1,
                    "seconds": clip.seconds,
                    "audio_url": f"/audio/{clip.key}",
                }
            return {"player": self.player, "run": self.run_dir.name, **self._progress(),
                    "current": current, "continents": list(CONTINENTS)}

    def _progress(self) -> dict[str, Any]:
        scored = [self._scored(k, p) for k, p in self.done.items()]
        guessed = [d for d, _ in scored if d is not None]
        return {
            "total": len(self.clips),
            "answered": len(self.done),
            "skipped": sum(1 for p in self.done.values() if p.status is Status.REFUSED),
            "score": round(sum(s for _, s in scored)),
            "max_score": 5000 * len(self.done),
            "mean_km": round(sum(guessed) / len(guessed), 1) if guessed else None,
        }

    def _scored(self, clip_id: str, p: Prediction) -> tuple[float | None, float]:
        """(distance km or None, GeoGuessr score 0-5000) of an answer; a skip scores 0."""
        if clip_id not in self._scores:

            clip = self.by_id[clip_id]
            if p.has_coordinates:
                d = float(geodesic_km(p.latitude, p.longitude, clip.latitude, clip.longitude))
                self._scores[clip_id] = (d, float(geoscore(d)))
            else:
                self._scores[clip_id] = (None, 0.0)
        return self._scores[clip_id]

    def audio_path(self, clip_id: str) -> Path:
        """The audio file of a manifest clip; the path comes from the manifest, not the URL."""
        clip = self.by_id.get(clip_id)
        if clip is None:
            raise RequestError(404, f"unknown clip {clip_id!r}: not in this game's manifest")
        return self.audio_root / clip.relpath

    # --- answers ---------------------------------------------------------------------------

    def guess(self, body: Any) -> dict[str, Any]:
        g = parse_guess(body, self.by_id)
        with self._lock:
            self._check_open(g.clip_id)
            place = {
                "latitude": g.latitude, "longitude": g.longitude,
                "city": g.city, "country": g.country, "continent": g.continent,
            }
            missing = tuple(f for f in PLACE_FIELDS if place[f] is None)
            prediction = Prediction(
                g.clip_id,
                Status.PARTIAL if missing else Status.OK,
                **place,
                missing=missing,
                meta=self._meta(g.clip_id, g.listened_s),
            )
            return self._record(prediction)

    def skip(self, body: Any) -> dict[str, Any]:
        obj = _object(body, _SKIP_FIELDS)
        clip_id = _clip_id(obj, self.by_id)
        listened = _listened(obj)
        with self._lock:
            self._check_open(clip_id)
            prediction = Prediction(
                clip_id,
                Status.REFUSED,
                refused=True,
                missing=PLACE_FIELDS,
                meta=self._meta(clip_id, listened),
            )
            return self._record(prediction)

    def _check_open(self, clip_id: str) -> None:
        if clip_id in self.done:
            raise RequestError(409, f"clip {clip_id!r} is already answered; reload the page")

    def _meta(self, clip_id: str, listened_s: float | None) -> dict[str, Any]:
        presented = self._presented.get(clip_id)
        meta: dict[str, Any] = {
            "backend": BACKEND,
            "model": self.player,
            "player": self.player,
            "round": len(self.done) + 1,
            "submitted_at": _now(),
        }
        if presented is not None:
            # Time on this clip since the page was shown it in this server's lifetime.
            meta["latency_s"] = round(time.monotonic() - presented, 3)
        if listened_s is not None:
            meta["listened_s"] = listened_s
        return meta

    def _record(self, prediction: Prediction) -> dict[str, Any]:
        """Write first (durably), then reveal: the answer leaves only after its record exists.
        A disk that refuses the record answers 507 (no room) or 503 (not writable) with its
        one line, and nothing is recorded (the writer cuts back a partial line): the player
        can guess again once there is room."""
        try:
            self._writer.write(prediction)
        except DiskError as exc:
            raise RequestError(exc.http_status, f"your guess was not saved: {exc}") from None
        self.done[prediction.sample_id] = prediction
        try:
            self._write_summary()
        except DiskError as exc:  # the guess is saved; the summary catches up on the next one
            print(f"agl play: warning: {exc}", file=sys.stderr)
        clip = self.by_id[prediction.sample_id]
        distance, score = self._scored(clip.key, prediction)
        result = {
            "clip_id": clip.key,
            "skipped": prediction.status is Status.REFUSED,
            "guess": {f: getattr(prediction, f) for f in PLACE_FIELDS},
            "truth": {
                "latitude": clip.latitude, "longitude": clip.longitude,
                "city": clip.city, "country": clip.country, "continent": clip.continent,
            },
            "distance_km": None if distance is None else round(distance, 1),
            "score": round(score),
            "path": None if distance is None else great_circle(
                prediction.latitude, prediction.longitude, clip.latitude, clip.longitude
            ),
        }
        return {"result": result, **self._progress()}

    def _write_summary(self) -> None:
        """run_summary.json beside the predictions, as inference writes one: `agl evaluate`
        takes backend and model from it into the run's MLflow params and tags."""
        counts = {s.value: 0 for s in Status}
        for p in self.done.values():
            counts[p.status.value] += 1
        latencies = [p.meta["latency_s"] for p in self.done.values() if "latency_s" in p.meta]
        summary = {
            "backend": BACKEND,
            "model": self.player,
            "player": self.player,
            "n": len(self.clips),
            "n_recorded": len(self.done),
            "complete": len(self.done) == len(self.clips),
            **{f"n_{k}": v for k, v in counts.items()},
            "mean_latency_s": round(sum(latencies) / len(latencies), 3) if latencies else None,
            "updated_at": _now(),
        }
        replace_atomically(self.run_dir / SUMMARY, (dumps(summary, indent=2) + "\n").encode("utf-8"))


# --- validation of what the page sends -------------------------------------------------------


def _object(body: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise RequestError(
            400, f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    return body


def _clip_id(obj: dict[str, Any], by_id: dict[str, Clip]) -> str:
    clip_id = obj.get("clip_id")
    if not isinstance(clip_id, str) or not clip_id:
        raise RequestError(400, "clip_id is required and must be a string")
    if clip_id not in by_id:
        raise RequestError(404, f"unknown clip {clip_id[:80]!r}: not in this game's manifest")
    return clip_id


def _number(obj: dict[str, Any], name: str, lo: float, hi: float) -> float:
    value = obj.get(name)
    if value is None:
        raise RequestError(400, f"{name} is required: click the map to place your guess")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(400, f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise RequestError(400, f"{name} {value} is outside [{lo:g}, {hi:g}]")
    return value


def _text(obj: dict[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError(400, f"{name} must be text, got {type(value).__name__}")
    value = value.strip()
    if len(value) > TEXT_LIMIT:
        raise RequestError(400, f"{name} is longer than {TEXT_LIMIT} characters")
    if _CONTROL.search(value):
        raise RequestError(400, f"{name} contains control characters")
    problem = unicode_problem(value)
    if problem:
        raise RequestError(400, f"{name} holds {problem}; send valid Unicode text")
    return value or None


def unicode_problem(text: str) -> str | None:
    """Why `text` cannot be written as UTF-8 (a lone surrogate from a `\\ud800` escape), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate {text[exc.start]!r} (\\u escapes must pair)"
    return None


def _listened(obj: dict[str, Any]) -> float | None:
    if obj.get("listened_s") is None:
        return None
    return round(_number(obj, "listened_s", 0.0, 86400.0), 3)


def parse_guess(body: Any, by_id: dict[str, Clip]) -> Guess:
    obj = _object(body, _GUESS_FIELDS)
    clip_id = _clip_id(obj, by_id)
    continent = _text(obj, "continent")
    if continent is not None and continent not in CONTINENTS:
        raise RequestError(400, f"continent {continent!r}: choose one of {', '.join(CONTINENTS)}")
    return Guess(
        clip_id=clip_id,
        latitude=_number(obj, "latitude", -90.0, 90.0),
        longitude=_number(obj, "longitude", -180.0, 180.0),
        city=_text(obj, "city"),
        country=_text(obj, "country"),
        continent=continent,
        listened_s=_listened(obj),
    )
