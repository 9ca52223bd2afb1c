"""Scoring protocols: turn (manifest, predictions) into a per-clip score table.

`paper` reproduces the authors' released analysis exactly (see ../shared/README.md):
  * rows: the clips that have a prediction; clips whose eight category columns are all 0
    are dropped, as the authors' filter does (none in AGL1K; the count is reported);
  * each of the five predicted fields is read as the authors' pipeline wrote it (the
    `original` strings of an imported file; for a run of this project, the fields the port of
    the authors' reply parser reads from its raw reply, agl.predictions.authors; a clip
    without a reply reads "Unknown", which is what the authors' pipeline wrote for failures);
  * a refused coordinate (NaN, '', 0, 0.0, -1, null, none, n/a, na, unknown, unable, cannot)
    scores 10,000 km; a coordinate that is present but not a number, or a latitude outside
    [-90, 90], is excluded from the distance metrics (the authors' geodesic raised and they
    averaged with NaN skipped); a longitude outside [-180, 180] is wrapped, as geopy does;
  * accuracies compare lower-cased strings after the authors' country/continent name
    normalisation, over the rows where both sides are present after normalisation;
  * reject rate: any of the five fields is a refusal; thresholds are strict `<` over the
    scored distances; a clip "has speech" when `human_sounds >= 0.1`.

`strict` scores every clip of the manifest and lets nothing out of the denominator:
  * a clip without a prediction, a failure, an unparseable reply or a refusal is wrong at
    every level and its distance is `strict_refusal_km` (default: the longest geodesic on
    Earth, 20,003.93 km, so a refusal can never beat a guess);
  * a predicted coordinate off the globe (|latitude| > 90, |longitude| > 180, infinite;
    e.g. 91, 1e300, 540) fails the clip the same way: counted (`failed`, and
    `n_invalid_coordinates` in the notes), never left out of the mean, never wrapped.
    `paper` keeps the authors' behaviour for these (above: an out-of-range latitude is left
    out of the distance metrics, a longitude is wrapped);
  * countries are compared as ISO 3166 alpha-3 codes (country_converter), Taiwan mapped to
    China on both sides as the dataset itself labels it;
  * the true continent comes from the manifest, or from the country where it is empty
    (AGL1K's six Vatican City rows); continents are compared by name after trimming,
    case-folding, dropping "the" and mapping Australia to Oceania; a hedge ("Europe or
    Asia") is wrong;
  * cities are compared case-folded with accents removed.

The table's layout and the join are `agl.scoring.score_table`; each protocol is its own module
(`agl.scoring.protocol_paper`, `agl.scoring.protocol_strict`).
"""

from __future__ import annotations

from agl.scoring.protocol_paper import score_paper
from agl.scoring.protocol_strict import score_strict

PROTOCOLS = {"paper": score_paper, "strict": score_strict}
