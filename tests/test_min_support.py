"""Statistics that refuse to over-claim: on the demo set's 32 clips (its places and sound
categories) with a constant guess, as the `prior` baseline makes, every estimate below minimum
support is withheld as "insufficient data (n = ..., needs ...)"."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from factories import manifest, prediction

from agl.dataset import demo
from agl.report import analysis
from agl.report.build import build_report
from agl.report.inputs import ReportOptions, RunInput
from agl.scoring.evaluate import score_run


@pytest.fixture(scope="module")
def demo_prior_scored() -> pd.DataFrame:
    rows = []
    for i, r in enumerate(demo.RECIPES):
        p = r.place
        rows.append(
            {
                "key": demo.key_of(i),
                "city": p.city,
                "country": p.country,
                "continent": p.continent,
                "latitude": p.latitude,
                "longitude": p.longitude,
                **demo._categories(r),
            }
        )
    frame = manifest(rows)
    # The prior baseline: the most frequent true country, at its first clip's place.
    top = Counter(frame["country"]).most_common(1)[0][0]
    at = frame[frame["country"] == top].iloc[0]
    preds = [prediction(k, at["latitude"], at["longitude"], at["city"], top, at["continent"]) for k in frame["key"]]
    return score_run(frame, preds, "paper")


def test_factor_analysis_on_the_demo_is_insufficient(demo_prior_scored):
    f = analysis.country_factors(demo_prior_scored, bootstrap=20)
    hits = int(demo_prior_scored["country_correct"].sum())
    assert 0 < hits < 10
    assert f.attrs["insufficient"].startswith(
        f"insufficient data (n = 32 scored clips: {hits} correct, {32 - hits} wrong; needs"
    )
    assert f["coef"].isna().all() and f["odds_ratio"].isna().all()
    assert set(f["factor"]) == {"speech", *analysis.SCENE_CATEGORIES}
    assert (f["n_present"] >= 0).all()


def test_factor_analysis_counts_failed_bootstrap_fits():
    # 24 clips, 2 correct: about one resample in eight holds no correct answer and cannot be fit.
    n = 24
    frame = pd.DataFrame(
        {
            "country_correct": [1.0, 1.0] + [0.0] * (n - 2),
            "has_speech": [True, False] * (n // 2),
            **{c: 0.0 for c in analysis.SCENE_CATEGORIES},
        }
    )
    f = analysis.country_factors(frame, bootstrap=40, min_present=1, min_events_per_factor=1)
    assert f.attrs["bootstrap_failed"] > 0
    assert f.attrs["bootstrap"] + f.attrs["bootstrap_failed"] == 40 == f.attrs["bootstrap_requested"]
    # A factor present in fewer than min_present clips is left out with its count.
    frame["music"] = 0.0
    frame.loc[:2, "music"] = 1.0
    f = analysis.country_factors(frame, bootstrap=5, min_present=4, min_events_per_factor=1)
    f = f.set_index("factor")
    assert f.at["music", "note"] == "insufficient data (n = 3 clips with, needs 4)"
    assert np.isnan(f.at["music", "coef"]) and np.isfinite(f.at["speech", "coef"])


def test_demo_report_withholds_every_estimate_below_minimum_support(demo_prior_scored, tmp_path):
    opts = ReportOptions(group_bootstrap=50, factor_bootstrap=20, paired_bootstrap=50, paired_permutations=50,
                         maps_for=0)
    build_report([RunInput("prior", demo_prior_scored)], tmp_path, options=opts)
    page = (tmp_path / "report.html").read_text()
    assert "No factor estimated: insufficient data (n = 32 scored clips" in page
    assert "odds_ratio" not in page
    continents = demo_prior_scored["true_continent"].value_counts()
    for continent, n in continents.items():
        # n clips, then n clusters (agl.scoring.clusters) with Kish's effective number, then the estimates
        row = re.search(rf"<tr><td>{continent}</td><td>{n}</td><td>\d+ \([\d.]+ effective\)</td>(.*?)</tr>",
                        page).group(1)
        if n < opts.min_support:  # every estimate withheld: the wording once, across the row
            assert row == (f"<td colspan='7' class='insufficient'>insufficient data (n = {n}, "
                           f"needs {opts.min_support})</td>")
        else:
            assert "insufficient" not in row and row.count("<td>") == 7
    assert (continents < opts.min_support).all()  # 4 to 7 clips per continent on the demo
    # ... so the accuracy-by-continent chart is a one-line note, not a chart of empty bars.
    assert "Accuracy by true continent: insufficient data (n = 4-7 scored clips per continent" in page
    assert not (tmp_path / "plots" / "accuracy_by_continent.png").exists()
    # The whole run (32 clips) and the speech split (12 / 20) are estimated, each over its
    # row's n (said once, in the n column: no cell repeats it).
    for group, n in (("all", 32), ("speech", 12), ("non-speech", 20)):
        row = re.search(rf"<tr><td>{group}</td><td>{n}</td><td>\d+ \([\d.]+ effective\)</td>(.*?)</tr>",
                        page).group(1)
        assert "insufficient" not in row and "(n = " not in row and row.count("<td>") == 7
