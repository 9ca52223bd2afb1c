"""Ranks with uncertainty (agl.scoring.ranks) and Holm-adjusted p-values (agl.scoring.paired)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agl.scoring.paired import holm, with_holm
from agl.scoring.ranks import rank_intervals


def test_holm_by_hand():
    """p = (0.01, 0.04, 0.03, 0.005) over a family of 4: sorted 0.005, 0.01, 0.03, 0.04 times
    4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> made monotone 0.02, 0.03, 0.06, 0.06."""
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert got.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # a test without a p-value (a withheld row) is not in the family; capped at 1
    assert holm([np.nan, 0.5, 0.2]).tolist()[1:] == pytest.approx([0.5, 0.4])
    assert np.isnan(holm([np.nan, 0.5, 0.2])[0]) and holm([0.9, 0.8]).tolist() == [1.0, 1.0]  # 0.8 x 2 capped at 1
    frame = with_holm(pd.DataFrame({"p_value": [0.01, 0.02]}), "two tests")
    assert frame["p_holm"].tolist() == [0.02, 0.02] and set(frame["family"]) == {"two tests"}


def test_five_runs_two_alike_overlap_and_are_grouped():
    """Five synthetic runs on 600 clips in 150 places: means about 1,000, 3,000, 3,000 (two
    runs drawn from one distribution), 5,000 and 7,000 km. The two alike share a group and
    their rank intervals overlap (2-3 each); the others are told apart, one rank each."""
    rng = np.random.default_rng(46)
    n, places = 600, 150
    labels = rng.integers(0, places, n)
    lat, lon = rng.uniform(-60, 60, places)[labels], rng.uniform(-180, 180, places)[labels]
    place = rng.normal(0, 400, places)[labels]  # a place is hard or easy for every run

    def run(mean):
        d = np.clip(mean + place + rng.normal(0, 800, n), 0, None)
        return pd.DataFrame({"sample_id": [f"c{i}" for i in range(n)], "distance_km": d,
                             "true_lat": lat, "true_lon": lon})

    tables = [run(1000), run(3000), run(3000), run(5000), run(7000)]
    got = rank_intervals(tables, "site:25", n=1000, seed=0)
    assert got["rank_group"].tolist() == [1, 2, 2, 3, 4]
    assert got["rank_lo"].tolist() == [1, 2, 2, 4, 5] and got["rank_hi"].tolist() == [1, 3, 3, 4, 5]
    shares = eval(got["rank_shares"][1])  # noqa: S307  (a dict written by rank_summary)
    assert min(shares["2"], shares["3"]) > 0.05 and shares["2"] + shares["3"] == pytest.approx(1.0)
    assert int(got["rank_clips"][0]) == n
