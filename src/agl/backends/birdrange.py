"""`birdrange`: an expert ear alone. BirdNET hears the species; their ranges place the clip.

Per clip: BirdNET's acoustic model lists the species heard above `min_confidence`
(`agl.birds.birdnet`), and the inversion of its range meta-model over a land grid picks the place
where they most plausibly occur together (`agl.birds.range_model`), in the week of the clip's
manifest `date` when there is one, year-round otherwise. Non-species classes (Engine, Siren,
Human vocal, ...) say nothing about a place and are not used. When no species is heard the
backend abstains: a structured refusal with the reason, which `paper` scores as 10,000 km
and `strict` as the worst case, never a made-up coordinate.

The reply is JSON like a model's (reasoning, city, country, continent, latitude, longitude),
so it goes through the same parser and scorer; `reasoning` names the species that drove the
guess. Settings (params.yaml `models: birdrange: settings:`): `resolution_deg` (1.0),
`scoring` (vote | log), `floor` (0.01: the occurrence kept in the grid, and log's floor),
`min_confidence` (0.7), `sensitivity`, `threads`, `batch_size`, `cache_dir`
(cache/birdrange), `use_dates` (true).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agl.backends.base import Backend
from agl.birds.birdnet import BirdConfig, Listener
from agl.birds.range_model import SCORINGS, YEAR_ROUND, invert, load_or_build, reasoning, week_of
from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.core.checks import number_setting
from agl.errors import AglError, reject_unknown_keys

_KNOWN = {
    "resolution_deg",
    "scoring",
    "floor",
    "min_confidence",
    "sensitivity",
    "threads",
    "batch_size",
    "cache_dir",
    "use_dates",
    "min_window_s",
}


class BirdRange(Backend):
    name = "birdrange"  # its entry in the index (agl.backends)
    # The reply also depends on the manifest's date, which the reply cache key does not see;
    # finished clips are never requested twice anyway (predictions.jsonl resumes).
    deterministic = False
    needs_audio = True
    loads_model = True  # a speech / bird model in this process: one Ray actor per copy

    default_model = "birdnet-v2.4-range"
    settings_rules: ClassVar[dict[str, str | None]] = {
        **{k: None for k in _KNOWN}, "resolution_deg": "positive", "floor": "share_open"}

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)

        reject_unknown_keys(settings, _KNOWN, "birdrange settings")
        self.resolution_deg = float(number_setting(settings, "resolution_deg", 1.0, "positive",
                                                   "birdrange setting"))
        self.scoring = str(settings.get("scoring", "vote"))
        if self.scoring not in SCORINGS:
            raise AglError(f"birdrange: scoring '{self.scoring}' is not one of {', '.join(SCORINGS)}")
        self.floor = float(number_setting(settings, "floor", 0.01, "share_open", "birdrange setting"))
        self.cache_dir = Path(settings.get("cache_dir", "cache/birdrange"))
        self.use_dates = bool(settings.get("use_dates", True))
        self.cfg = BirdConfig.from_params(
            {
                k: settings[k]
                for k in ("min_confidence", "sensitivity", "threads", "batch_size", "min_window_s")
                if k in settings
            },
            source="birdrange settings",
        )
        self._weeks: dict[str, int] = {}
        self._grids: dict[int, Any] = {}
        self._listener = None
        self._lock = threading.Lock()  # one interpreter: one clip at a time

    def prepare(self, clips: Sequence[Any], audio_root: Path | None) -> None:
        self._weeks = {c.key: (week_of(getattr(c, "date", "")) if self.use_dates else YEAR_ROUND) for c in clips}

    def grid(self, week: int):
        """The occurrence grid of a week, loaded from (or built into) the cache once."""
        if week not in self._grids:
            self._grids[week], _ = load_or_build(
                self.cache_dir,
                resolution_deg=self.resolution_deg,
                week=week,
                floor=self.floor,
                threads=self.cfg.threads,
            )
        return self._grids[week]

    def listener(self):
        if self._listener is None:
            self._listener = Listener(self.cfg)
        return self._listener

    def answer(self, key: str, path: Path, week: int) -> Reply:
        """Listen, then invert (synchronous; `generate` runs it off the event loop)."""
        with self._lock:
            t0 = time.perf_counter()
            heard = self.listener().listen(key, path)
            listen_s = time.perf_counter() - t0
            if heard.status != "ok":
                return Reply(ReplyStatus.FAILED, error=f"BirdNET could not listen: {heard.error}")
            species = [(d.scientific, d.max_confidence) for d in heard.species]
            others = ", ".join(d.common for d in heard.others) or "none"
            if not species:
                return Reply(
                    ReplyStatus.REFUSED,
                    text=(
                        f"abstained: BirdNET heard no species at confidence >= "
                        f"{self.cfg.min_confidence:g} (non-species classes: {others}); birdsong "
                        "is the only cue this baseline reads"
                    ),
                    extra={
                        "listen_s": round(listen_s, 3),
                        "birds_heard": False,
                        "other_classes": [d.scientific for d in heard.others],
                    },
                )
            grid = self.grid(week)
            t1 = time.perf_counter()
            guess = invert(grid, species, scoring=self.scoring, floor=self.floor)
            invert_s = time.perf_counter() - t1
        answer = {
            "reasoning": reasoning(guess, week, self.resolution_deg, scoring=self.scoring),
            "city": guess.city or None,
            "country": guess.country or None,
            "continent": guess.continent or None,
            "latitude": round(guess.latitude, 6),
            "longitude": round(guess.longitude, 6),
        }
        return Reply(
            ReplyStatus.OK,
            text=json.dumps(answer),
            input_tokens=0,
            output_tokens=0,
            extra={
                "listen_s": round(listen_s, 3),
                "invert_s": round(invert_s, 6),
                "birds_heard": True,
                "week": week,
                "species_weights": [[s, round(w, 6)] for s, w in species],
                "other_classes": [d.scientific for d in heard.others],
            },
        )

    async def generate(self, request: Request) -> Reply:
        if request.audio_path is None:
            return Reply(ReplyStatus.FAILED, error="birdrange listens to the audio; none given")

        week = self._weeks.get(request.sample_id, YEAR_ROUND)
        return await asyncio.to_thread(self.answer, request.sample_id, request.audio_path, week)
