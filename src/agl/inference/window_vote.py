"""One answer from the answers of a clip's windows, combined on the sphere (`aggregate:
vote_medoid`; docs/inference.md#long-audio says why this rule).

A place is not text to concatenate (AU-Harness joins per-chunk text) nor a mean (the mean of
a point in Fiji at 179.9 E and one at 179.9 W is in Africa's longitude, and the mean of Lisbon
and Tokyo lies in Siberia). The rule:

* country: a plurality vote of the windows that name one, each weighted by its stated
  confidence (1 where it states none), names compared case-blind, without punctuation or a
  leading "the" ("the Netherlands" and "netherlands." are one vote; "USA" and "United
  States" are two: the scorer's alias table lives on a floor above the runs, and one model
  names one country one way within a run);
  a tie goes to the country of the medoid window, taken among the tied countries' windows;
* point: the spherical medoid of the windows' points, the window answer with the least summed
  geodesic distance to the others (always a point some window said, never a mean: it is
  robust to one wild window and has no antimeridian problem); equal sums go to the earlier
  window;
* city, continent, confidence, reasoning: the medoid window's own.

Refused, unparseable and failed windows do not vote. A clip with a failed window is failed
(the run retries it; windows already answered come from the cache); one where no window gave
anything usable is refused if any window refused, else unparseable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agl.core.geo import geodesic_km
from agl.predictions.records import PLACE_FIELDS, Prediction, Status

_USABLE = (Status.OK, Status.PARTIAL)


@dataclass(frozen=True)
class Vote:
    """The combined fields and how they were reached."""

    latitude: float | None
    longitude: float | None
    country: str | None
    city: str | None
    continent: str | None
    confidence: float | None
    medoid: int | None  # the index of the medoid window (None: no window gave a point)
    country_weights: dict[str, float]  # normalised country -> summed weight
    agreement: float | None  # share of the voting windows that named the winning country
    reasoning: str | None = None
    raw_reply: str | None = None


def country_key(name: str | None) -> str | None:
    """The key a country name votes under (None: no name)."""
    if name is None:
        return None
    key = " ".join(str(name).replace(",", " ").replace(".", " ").replace(";", " ").split()).casefold()
    key = key.removeprefix("the ").strip()
    return key or None


def _weight(p: Prediction) -> float:
    c = p.confidence
    return float(c) if c is not None and np.isfinite(c) and 0 < c <= 1 else 1.0


def medoid_index(points: Sequence[tuple[float, float]]) -> int | None:
    """The index of the point with the least summed geodesic distance to the others
    (the earliest of equal ones); None for no points."""
    if not points:
        return None
    lat = np.array([p[0] for p in points], dtype=float)
    lon = np.array([p[1] for p in points], dtype=float)
    n = len(points)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    dist = geodesic_km(lat[i.ravel()], lon[i.ravel()], lat[j.ravel()], lon[j.ravel()]).reshape(n, n)
    sums = np.round(dist.sum(axis=1), 6)  # equal sums must compare equal whatever the order
    return int(np.argmin(sums))


def combine(windows: Sequence[Prediction]) -> Vote:
    """The vote over `windows` (in time order). Only usable windows (ok, partial) count."""
    usable = [(i, p) for i, p in enumerate(windows) if p.status in _USABLE]
    located = [(i, p) for i, p in usable if p.has_coordinates]
    mi = medoid_index([(p.latitude, p.longitude) for _, p in located])
    medoid = located[mi][0] if mi is not None else None

    weights: dict[str, float] = {}
    names: dict[str, str] = {}
    for _, p in usable:
        key = country_key(p.country)
        if key is None:
            continue
        weights[key] = weights.get(key, 0.0) + _weight(p)
        names.setdefault(key, p.country)  # the first spelling a window used
    country = None
    if weights:
        top = max(weights.values())
        tied = [k for k, v in weights.items() if np.isclose(v, top, rtol=0, atol=1e-9)]
        if len(tied) == 1:
            country = tied[0]
        else:
            among = [(i, p) for i, p in located if country_key(p.country) in tied]
            k = medoid_index([(p.latitude, p.longitude) for _, p in among])
            if k is not None:
                country = country_key(among[k][1].country)
            else:  # no point among the tied: the earliest window naming one of them
                country = next(country_key(p.country) for _, p in usable
                               if country_key(p.country) in tied)
    voters = sum(1 for _, p in usable if country_key(p.country) is not None)
    agreeing = sum(1 for _, p in usable if country is not None and country_key(p.country) == country)
    source = windows[medoid] if medoid is not None else (usable[0][1] if usable else None)
    # The medoid window's own spelling when it names the winner, else the first spelling used.
    shown = None
    if country is not None:
        shown = (source.country if source is not None and country_key(source.country) == country
                 else names[country])
    return Vote(
        latitude=None if medoid is None else windows[medoid].latitude,
        longitude=None if medoid is None else windows[medoid].longitude,
        country=shown,
        city=source.city if source is not None else None,
        continent=source.continent if source is not None else None,
        confidence=source.confidence if source is not None else None,
        medoid=medoid,
        country_weights=dict(sorted(weights.items())),
        agreement=None if voters == 0 else agreeing / voters,
        reasoning=source.reasoning if source is not None else None,
        raw_reply=source.raw_reply if source is not None else None,
    )


def combined_prediction(sample_id: str, windows: Sequence[Prediction], meta: dict[str, Any]) -> Prediction:
    """The clip's record from its windows' records: the vote's fields and a status (see the
    module docstring); `meta` is the record's (the windows list, summed usage, heard_s)."""
    failed = [i for i, p in enumerate(windows) if p.status is Status.FAILED]
    if failed:
        first = windows[failed[0]]
        return Prediction(sample_id, Status.FAILED, meta=meta,
                          error=f"window {failed[0] + 1} of {len(windows)} failed: {first.error}")
    vote = combine(windows)
    values = {"latitude": vote.latitude, "longitude": vote.longitude, "city": vote.city,
              "country": vote.country, "continent": vote.continent}
    missing = tuple(f for f in PLACE_FIELDS if values[f] is None)
    meta = {**meta, "window_vote": {"medoid_window": vote.medoid, "country_weights": vote.country_weights,
                                    "agreement": vote.agreement}}
    refused = any(p.refused for p in windows)
    if len(missing) == len(PLACE_FIELDS):
        status = Status.REFUSED if refused else Status.UNPARSEABLE
        return Prediction(sample_id, status, refused=status is Status.REFUSED, missing=missing,
                          raw_reply=windows[0].raw_reply if windows else None,
                          error=None if refused else "no window gave a usable answer", meta=meta)
    return Prediction(sample_id, Status.PARTIAL if missing else Status.OK, **values,
                      confidence=vote.confidence, reasoning=vote.reasoning, raw_reply=vote.raw_reply,
                      refused=False, missing=missing, meta=meta)


# --- per-run figures ---------------------------------------------------------------------


def window_figures(records: Sequence[Prediction], truth: dict[str, tuple[float, float]] | None = None
                   ) -> dict[str, Any] | None:
    """What combining windows did over a run's windowed records (None: none was windowed):

    * `window_agreement`: the mean, over clips, of the share of voting windows that named the
      final country;
    * `first_window_agrees`: the share of clips whose first window named the final country
      (how often hearing the whole clip changed the first 30 s's answer);
    * with `truth` (sample_id -> lat, lon): mean km of the combined answer, of the first
      window alone, and of the any-window oracle (the window closest to the truth: what a
      perfect combiner could reach; its gap to the combined answer is what combining loses).
    """
    rows = [p for p in records if isinstance(p.meta.get("windows"), list) and len(p.meta["windows"]) > 1]
    if not rows:
        return None
    agreement, first_agrees = [], []
    combined_km, first_km, oracle_km = [], [], []
    for p in rows:
        vote = p.meta.get("window_vote") or {}
        if vote.get("agreement") is not None:
            agreement.append(float(vote["agreement"]))
        wins = p.meta["windows"]
        first = wins[0]
        if p.country is not None:
            first_agrees.append(country_key(first.get("country")) == country_key(p.country))
        if truth is None or p.sample_id not in truth or not p.has_coordinates:
            continue
        lat, lon = truth[p.sample_id]
        pts = [(w["latitude"], w["longitude"]) for w in wins
               if w.get("status") in ("ok", "partial") and w.get("latitude") is not None
               and w.get("longitude") is not None]
        d = geodesic_km([lat] * len(pts), [lon] * len(pts), [q[0] for q in pts], [q[1] for q in pts])
        combined_km.append(float(geodesic_km(lat, lon, p.latitude, p.longitude)))
        oracle_km.append(float(np.min(d)))
        if first.get("latitude") is not None and first.get("longitude") is not None \
                and first.get("status") in ("ok", "partial"):
            first_km.append(float(geodesic_km(lat, lon, first["latitude"], first["longitude"])))

    def mean(xs: list[float]) -> float | None:
        return float(np.mean(xs)) if xs else None

    out: dict[str, Any] = {
        "n_windowed": len(rows),
        "mean_windows": float(np.mean([len(p.meta["windows"]) for p in rows])),
        "window_agreement": mean(agreement),
        "first_window_agrees": mean([float(x) for x in first_agrees]),
    }
    if truth is not None:
        out.update({"combined_mean_km": mean(combined_km), "first_window_mean_km": mean(first_km),
                    "oracle_mean_km": mean(oracle_km), "n_scored": len(combined_km)})
    return out
