"""Headline metrics (what `dvc exp show` lists) and the γ/θ sensitivity comparison."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from agl.core.headline import localizability_headline, run_headline, write_headline
from agl.curation.sensitivity import add_to_report, compare, sweep_table
from agl.errors import AglError


def test_run_headline_is_compact_and_rounded(tmp_path):
    doc = {
        "cost_usd": 0.123456789,
        "wall_s": 12.3,
        "protocols": {
            "paper": {
                "n": 4,
                "n_distance_scored": 3,
                "distance_error_km": 1234.56789,
                "median_km": 1000.0004,
                "city_acc": 0.25,
                "country_acc": 1 / 3,
                "continent_acc": 0.5,
                "reject_rate": 0.25,
                "failure_rate": 0.0,
                "within_1km": 0.0,
                "ci95": {},
            }
        },
    }
    h = run_headline(doc, "knn")
    # Under the run's name, so `dvc exp show` heads the column `knn.mean_km`; only what a
    # user compares across experiments (n, coverage, cost stay in metrics.json).
    assert h == {"knn": {
        "mean_km": 1234.568,
        "median_km": 1000.0,
        "city_acc": 0.25,
        "country_acc": 0.333333,
        "continent_acc": 0.5,
        "failure_rate": 0.0,
    }}
    write_headline(tmp_path / "m" / "knn.json", h)
    assert json.loads((tmp_path / "m" / "knn.json").read_text()) == h  # no timings
    with pytest.raises(AglError, match="no protocol"):
        run_headline({"protocols": {}}, "knn")


def test_headline_keys_are_unique_across_files():
    """`dvc exp show` drops the file name from a column header only when no other metrics
    file has the same flattened key: every headline nests under its own name."""
    from agl.core.headline import (
        birds_headline,
        counterfactual_headline,
        filter_headline,
        speech_headline,
        tag_headline,
    )

    docs = [
        filter_headline({"clips": 32, "passed": 26}),
        tag_headline({"tagged": 26, "mean_speech_fraction": 0.23}),
        birds_headline({"listened": 26, "birds_heard": 3}),
        speech_headline({"listened": 26, "speech_heard": 12, "languages": {"en": 3, "de": 2}}),
        localizability_headline({"clips": 26, "selection": {"highly_localizable": 11, "selected": 10,
                                                            "selected_speech": 5}}),
        run_headline({"protocols": {"paper": {"n": 1}}}, "knn"),
        run_headline({"protocols": {"paper": {"n": 1}}}, "prior"),
        counterfactual_headline({"knn/mask_speech/default/all": {"n": 16, "delta_km": 1381.3654},
                                 "knn/mask_speech/default/speech": {"n": 7, "insufficient": "x"},
                                 "knn/truncate/seconds_3/all": {"n": 9, "insufficient": "x"}}),
    ]
    assert docs[-1] == {"delta_km": {"knn.mask_speech": 1381.365, "knn.truncate.seconds_3": None}}
    tops = [next(iter(d)) for d in docs]
    assert len(set(tops)) == len(tops) and all(len(d) == 1 for d in docs)


def test_localizability_headline_speech_share():
    summary = {
        "clips": 26,
        "selection": {"highly_localizable": 11, "selected": 10, "selected_speech": 4},
        "check_holdout": {"n": 8, "spearman_rho": -0.56630616},
    }
    assert localizability_headline(summary) == {"localize": {
        "selected": 10,
        "speech_share": 0.4,
        "holdout_rho": -0.566306,
    }}


def _clips(selected, l_k):
    keys = [f"k{i}" for i in range(len(l_k))]
    return pd.DataFrame(
        {
            "key": keys,
            "l_k": l_k,
            "selected": [k in selected for k in keys],
            "has_speech": [i % 2 == 0 for i in range(len(l_k))],
            "split": ["holdout" if i < 4 else "fit" for i in range(len(l_k))],
        }
    )


def test_compare_against_the_default_selection(tmp_path):
    default = _clips({"k0", "k1", "k2"}, [0.9, 0.5, 0.4, 0.1, 0.3, 0.2])
    same = compare(default, default)
    assert same == {"selected": 3, "jaccard": 1.0, "speech_share": 0.666667, "rank_rho": 1.0}
    moved = compare(default, _clips({"k2", "k3"}, [0.1, 0.4, 0.5, 0.9, 0.3, 0.2]))
    assert moved["selected"] == 2 and moved["jaccard"] == 0.25  # {k2} of {k0..k3}
    assert moved["rank_rho"] == -1.0 and moved["speech_share"] == 0.5
    table = sweep_table(
        [
            {"gamma_km": g, "theta": 0.0, **moved, "holdout_rho": 0.1, "experiment": f"e{g}", "status": "ok"}
            for g in (5000.0, 1000.0)
        ]
    )
    assert list(table["gamma_km"]) == [1000.0, 5000.0]
    csv = tmp_path / "sensitivity.csv"
    table.to_csv(csv, index=False)
    report = tmp_path / "report.html"
    report.write_text("<html><section id='provenance'>p</section></html>")
    add_to_report(report, csv, tmp_path / "plots")
    text = report.read_text()
    assert text.index("sensitivity-section") < text.index("provenance")
    assert "data:image/png;base64" in text and (tmp_path / "plots" / "sensitivity.png").exists()


def test_every_declared_metric_is_a_headline_in_git_and_every_build_output_cached():
    """A metric is a small file under metrics/ tracked in git (so `dvc exp show` has it at
    every commit: no `!`), and nothing under build/ is `cache: false` (so `dvc push` /
    `dvc pull` carry it and a fresh clone re-runs nothing)."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    seen = []
    for name, stage in stages.items():
        body = stage.get("do", stage)
        for kind in ("outs", "metrics"):
            for entry in body.get(kind) or []:
                path, opts = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
                cached = (opts or {}).get("cache", True)
                if kind == "metrics":
                    seen.append(path)
                    assert path.startswith("metrics/") and cached is False, (name, path)
                else:
                    assert not (path.startswith("build/") and cached is False), (name, path)
    assert {"metrics/curation/birds.json", "metrics/curation/speech.json",
            "metrics/counterfactual.json", "metrics/runs/${key}.json"} <= set(seen)
