"""Guessing baselines that never listen: the floor every model must beat.

* `random`: the paper's baseline, latitude uniform in [-90, 90] and longitude uniform in
  [-180, 180]. That over-samples the poles (a band of latitude near a pole is a small
  area), which is what the authors did. Unlike theirs it is seeded: each clip's draw comes
  from `Random(f"{seed}:{sample_id}")`, so a run is reproducible and does not depend on the
  order or concurrency in which clips are answered.
* `random-sphere`: uniform over the sphere's area (latitude = asin(U[-1, 1])).
* `prior`: the best *constant* guess that needs no training: every clip gets the same answer,
  the most frequent country of the manifest with the spherical centroid of that country's
  clips, its most frequent city and continent. "Training-free" here means no model is fitted
  and the audio is ignored; it does read the label distribution of the manifest it is
  evaluated on (leave-one-out would change the constant by at most one clip in 1,444), so it
  is an oracle prior, an upper bound for blind guessing.

Replies are JSON text like a model's, so they go through the same parser and scorer.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agl.backends.base import Backend
from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.core.checks import check_value
from agl.errors import AglError


class _Blind(Backend):
    deterministic = True
    needs_audio = False
    recompute = True  # free and offline: a rerun answers again, never trusts the file
    settings_rules: ClassVar[dict[str, str | None]] = {"seed": "seed"}

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        check_value("seed", settings.get("seed", 0), f"{self.name} backend setting", rule="seed",
                    example="0")
        self.seed = int(settings.get("seed", 0))

    def _rng(self, sample_id: str) -> random.Random:
        return random.Random(f"{self.seed}:{sample_id}")

    @staticmethod
    def _reply(answer: dict[str, Any]) -> Reply:
        return Reply(ReplyStatus.OK, text=json.dumps(answer), input_tokens=0, output_tokens=0)


class UniformRandom(_Blind):
    """The paper's random baseline (seeded): lat U[-90, 90], lon U[-180, 180]."""

    name = "random"  # its entry in the index (agl.backends)

    default_model = "uniform-latlon"

    async def generate(self, request: Request) -> Reply:
        rng = self._rng(request.sample_id)
        lat, lon = rng.uniform(-90, 90), rng.uniform(-180, 180)
        return self._reply({"latitude": lat, "longitude": lon,
                            "reasoning": "uniform in latitude and longitude"})


class SphereRandom(_Blind):
    """A point drawn uniformly over the Earth's surface (seeded per clip)."""

    name = "random-sphere"  # its entry in the index (agl.backends)

    default_model = "uniform-sphere"

    async def generate(self, request: Request) -> Reply:
        rng = self._rng(request.sample_id)
        lat = math.degrees(math.asin(rng.uniform(-1, 1)))
        lon = rng.uniform(-180, 180)
        return self._reply({"latitude": lat, "longitude": lon,
                            "reasoning": "uniform over the sphere"})


def spherical_centroid(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The normalised mean of unit vectors: a centroid that respects the antimeridian."""
    x = y = z = 0.0
    for lat, lon in points:
        la, lo = math.radians(lat), math.radians(lon)
        x += math.cos(la) * math.cos(lo)
        y += math.cos(la) * math.sin(lo)
        z += math.sin(la)
    lat = math.degrees(math.atan2(z, math.hypot(x, y)))
    lon = math.degrees(math.atan2(y, x))
    return lat, lon


class CountryPrior(_Blind):
    """One constant answer: the manifest's most frequent country (see module docstring)."""

    name = "prior"  # its entry in the index (agl.backends)

    # The answer is the manifest's, which the response cache's key does not see: never
    # cached, and kept across reruns only while the manifest's labels are unchanged.
    deterministic = False
    reads_dataset = True
    default_model = "top-country-centroid"
    answer: dict[str, Any] | None = None

    def prepare(self, clips: Sequence[Any], audio_root: Path | None) -> None:
        labelled = [c for c in clips if c.country]
        if not labelled:
            raise AglError("prior baseline: no clip in the manifest has a country")
        counts = Counter(c.country for c in labelled)
        # Ties broken by name so the constant does not depend on manifest order.
        country = min(counts, key=lambda k: (-counts[k], k))
        mine = [c for c in labelled if c.country == country]
        lat, lon = spherical_centroid([(c.latitude, c.longitude) for c in mine])

        def mode(values: list[str]) -> str | None:
            vc = Counter(v for v in values if v)
            return min(vc, key=lambda k: (-vc[k], k)) if vc else None

        self.answer = {
            "reasoning": f"constant guess: most frequent country ({counts[country]} of "
                         f"{len(labelled)} clips), centroid of its clips",
            "city": mode([c.city for c in mine]),
            "country": country,
            "continent": mode([c.continent for c in mine]),
            "latitude": lat,
            "longitude": lon,
        }

    async def generate(self, request: Request) -> Reply:
        if self.answer is None:
            raise AglError("prior baseline: prepare(clips) was not called")
        return self._reply(self.answer)
