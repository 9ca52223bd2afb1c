"""The report's "What language alone tells" on small hand-made runs (no model loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

CFG = {"protocol": "paper", "group_bootstrap": 200, "seed": 0, "paired_bootstrap": 200, "paired_permutations": 200,
       "min_support": 10}


def speech_section(speech, run_dirs, cfg, tables):
    """The section over the runs the report would collect from `run_dirs`."""
    from agl.report.inputs import ReportConfig, collect_runs
    from agl.report.sections.speech import speech_section as section

    options = ReportConfig.from_params(cfg).options
    return section(speech, collect_runs(run_dirs, options.protocol), options, tables)


def _speech_table(path: Path) -> dict[str, str]:
    """30 clips: 14 German, 3 French (pooled below 10), 5 uncertain, 8 without speech."""
    rows, truth = [], {}
    for i in range(30):
        key = f"k{i:02d}"
        if i < 14:
            status, lang, name = "ok", "de", "German"
        elif i < 17:
            status, lang, name = "ok", "fr", "French"
        elif i < 22:
            status, lang, name = "uncertain", "", ""
        else:
            status, lang, name = "no_speech", "", ""
        truth[key] = name
        rows.append({"key": key, "status": status, "speech_heard": status != "no_speech", "language": lang,
                     "language_name": name, "language_probability": 0.9 if lang else None, "candidates": "",
                     "seconds": 20.0, "speech_seconds": 10.0, "windows_read": 1, "speech_windows": 1, "error": ""})
    pd.DataFrame(rows).to_csv(path, index=False)
    return truth


def _run(root: Path, name: str, backend: str, right: set[str], keys: list[str], reasoning: str = "") -> None:
    d = root / name
    d.mkdir(parents=True)
    rows, preds = [], []
    for k in keys:
        ok = k in right
        rows.append({"sample_id": k, "status": "ok", "has_speech": True, "refused": False, "failed": False,
                     "distance_km": 100.0 if ok else 5000.0, "city_correct": 0.0, "country_correct": float(ok),
                     "continent_correct": 1.0, "true_country": "Germany", "pred_country": "Germany" if ok else "Chad"})
        preds.append({"sample_id": k, "status": "ok", "reasoning": f"{reasoning} {k}", "meta": {}})
    pd.DataFrame(rows).to_csv(d / "scores_paper.csv", index=False)
    (d / "metrics.json").write_text(json.dumps({"run": name, "data_version": "v1", "dataset_clips": len(keys)}))
    (d / "run_summary.json").write_text(json.dumps({"backend": backend}))
    (d / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))


@pytest.fixture
def built(tmp_path):
    speech = tmp_path / "speech.csv"
    _speech_table(speech)
    keys = [f"k{i:02d}" for i in range(30)]
    runs = tmp_path / "runs"
    # the model: right on k00-k11 (12 German clips) and on k14 (French); the prior on k00-k09
    _run(runs, "model", "gemini", {f"k{i:02d}" for i in (*range(12), 14)}, keys, "I hear German")
    _run(runs, "langprior", "langprior", {f"k{i:02d}" for i in range(10)}, keys)
    _run(tmp_path / "paper", "published", "replay", {"p1"}, ["p1", "p2"])
    tables, figs = tmp_path / "tables", tmp_path / "figs"
    tables.mkdir()
    figs.mkdir()
    page = speech_section(speech, [runs, tmp_path / "paper"], CFG, tables)
    return page, tables


def test_accuracy_by_language_pools_rare_languages_and_keeps_no_speech(built):
    page, tables = built
    t = pd.read_csv(tables / "speech_language_breakdown.csv")
    mine = t[t["run"] == "model"].set_index("group")
    assert list(mine.index) == ["German", "other languages (1: French)", "speech, language uncertain", "no speech"]
    assert mine.loc["German", "n"] == 14 and mine.loc["German", "country_acc"] == pytest.approx(12 / 14)
    assert mine.loc["no speech", "n"] == 8
    assert "insufficient data (n = 3, needs 10)" in page  # French, pooled alone, is below support


def test_beyond_the_language_counts_what_the_prior_explains(built):
    page, tables = built
    c = pd.read_csv(tables / "speech_beyond_language.csv").iloc[0]
    # clips with a language: k00-k16 (17); model right on 13 of them, the prior on 10, both on 10
    assert (c["clips"], c["run_correct"], c["prior_correct"], c["both_correct"]) == (17, 13, 10, 10)
    assert c["run_only"] == 3 and c["share_of_run_correct_also_prior"] == pytest.approx(10 / 13)
    ex = pd.read_csv(tables / "speech_beyond_examples.csv")
    assert ex["sample_id"].tolist() == ["k10", "k11", "k14"]
    assert ex["run_reasoning"].iloc[0] == "I hear German k10"
    paired = pd.read_csv(tables / "speech_beyond_paired.csv")
    assert set(paired["metric"]) == {"distance_km", "country_correct", "continent_correct"}


def test_runs_on_unheard_audio_are_named_with_what_they_need(built):
    page, _ = built
    assert "Not covered: published" in page and "dvc repro speech" in page


def test_without_a_speech_table_or_a_prior(tmp_path):
    page = speech_section(tmp_path / "none.csv", [], CFG, tmp_path)
    assert "speech stage did not run" in page
    speech = tmp_path / "speech.csv"
    _speech_table(speech)
    runs = tmp_path / "runs"
    _run(runs, "model", "gemini", set(), [f"k{i:02d}" for i in range(30)])
    page = speech_section(speech, [runs], CFG, tmp_path)
    assert "No langprior run" in page


def test_the_attribute_joins_any_per_clip_frame(tmp_path):
    from agl.speech.tables import NOT_LISTENED, attach

    speech = tmp_path / "speech.csv"
    _speech_table(speech)
    frame = pd.DataFrame({"sample_id": ["k00", "k15", "k20", "k25", "zz"]})
    got = attach(frame, speech)["spoken_language"].tolist()
    assert got == ["German", "French", "speech, language uncertain", "no speech", NOT_LISTENED]
