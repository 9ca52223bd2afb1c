"""Dates: the recording date from a file's tags, the upload date from the Archive's item
metadata (a fake Archive), and a model's post-cutoff row on the leaderboard with the right n."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
from fake_archive import FakeArchive

from agl.dataset.dates import after, recorded_on, uploaded_on
from agl.dataset.fetch import Policy
from agl.dataset.manifest import ManifestWarning, load_manifest, write_manifest

KEYS = ("aporee_26839_30948", "aporee_5201_6631")
ESSAOUIRA = "aporee_26839_30948/20020207EssaouiraRempartsMuezzin.mp3"


def test_the_recording_date_comes_from_the_tags(archive_dir):
    # COMM holds "2002-02-07 16:18:00 Rue Mellah, ..."; its TDRC says 2015 (the tagging year)
    assert recorded_on(archive_dir / ESSAOUIRA) == ("2002-02-07", "tags:COMM")
    # the Berlin clip's title ends "Juni 2003"; its TDRC says 2003
    assert recorded_on(archive_dir / "aporee_5201_6631/AmselanDietersFensterJuni2003Edit.mp3") == (
        "2003-06", "tags:TIT2")


def test_upload_dates_from_a_fake_archive_become_manifest_columns(archive_dir, agl1k_manifest, tmp_path):
    from agl.dataset.prepare import DatasetSpec, prepare

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        frame = load_manifest(agl1k_manifest)
    two = tmp_path / "two.csv"
    write_manifest(frame[frame["key"].isin(KEYS)], two)
    server = FakeArchive(root=archive_dir).start()
    server.metadata[KEYS[0]] = {"metadata": {"identifier": KEYS[0], "publicdate": "2015-03-05 10:11:12",
                                             "addeddate": "2015-03-04 09:00:00"}, "files": []}
    server.metadata[KEYS[1]] = {"metadata": {"identifier": KEYS[1]}, "files": []}  # no date
    policy = Policy(base_url=f"{server.url}/download", metadata_url=f"{server.url}/metadata",
                    progress=False, sleep=lambda s: None)
    try:
        prepare(DatasetSpec(dataset=str(two), out=tmp_path / "data"), policy)
        asked = len(server.requests("/metadata/"))
        got = load_manifest(tmp_path / "data" / "manifest.csv").set_index("key")
        prepare(DatasetSpec(dataset=str(two), out=tmp_path / "data"), policy)
        assert len(server.requests("/metadata/")) == asked  # each item asked once, across runs
    finally:
        server.stop()
    assert got.at[KEYS[0], "date"] == "2002-02-07" and got.at[KEYS[0], "date_source"] == "tags:COMM"
    assert got.at[KEYS[0], "upload_date"] == "2015-03-05"
    assert got.at[KEYS[0], "upload_date_source"] == "archive:publicdate"
    assert got.at[KEYS[1], "upload_date"] == "" and got.at[KEYS[1], "upload_date_source"] == "archive:no date"
    assert got.at[KEYS[1], "date"] == "2003-06"


def test_dates_compare_at_their_precision():
    assert uploaded_on({"metadata": {"addeddate": "2019-12-31 23:59:59"}}) == ("2019-12-31", "archive:addeddate")
    assert uploaded_on({"files": []}) == ("", "")
    assert after(["2024-06-02", "2024-06-01", "2024-07", "2024-06", "", None, "2023"],
                 "2024-06-01") == [True, False, True, None, None, None, False]


@pytest.fixture(scope="module")
def dated_demo(tmp_path_factory, demo_data) -> Path:
    """The demo manifest with upload dates: clips 1-10 in 2014, 11-29 in 2025, 30-32 unknown
    (no audio: the runs here guess without listening)."""
    root = tmp_path_factory.mktemp("dated")
    frame = load_manifest(demo_data / "manifest.csv")
    n = len(frame)
    frame["date"] = [""] * n
    frame["date_source"] = [""] * n
    frame["upload_date"] = ["2014-05-01"] * 10 + ["2025-01-15"] * 19 + [""] * (n - 29)
    frame["upload_date_source"] = ["archive:publicdate"] * 29 + [""] * (n - 29)
    write_manifest(frame, root / "manifest.csv")
    return root


def test_a_roster_entry_with_a_cutoff_gets_a_post_cutoff_row_with_the_right_n(dated_demo, tmp_path):
    from agl.contracts.models import parse_models
    from agl.dataset.manifest import clips
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.prompts import load_prompt
    from agl.scoring import leaderboard
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    (spec,) = parse_models({"guess": {"backend": "random-sphere", "model": "uniform-sphere",
                                      "settings": {"seed": 0}, "training_cutoff": pd.Timestamp("2024-06-01").date()}})
    assert spec.training_cutoff == "2024-06-01"
    manifest = dated_demo / "manifest.csv"
    run_inference(spec, load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / "guess",
                  audio_root=None, options=RunOptions(progress=False))
    config = EvaluateConfig(protocols=("paper",), metric_bootstrap=50, track=False)
    doc = evaluate_run("guess", tmp_path / "guess" / "predictions.jsonl", manifest, tmp_path / "guess",
                       config, info={"model": spec.model, "backend": spec.backend,
                                     "training_cutoff": spec.training_cutoff})
    late = doc["protocols"]["paper"]["post_cutoff"]
    assert (late["n"], late["n_before"], late["n_undated"]) == (19, 10, 3)
    assert late["cutoff"] == "2024-06-01" and "ci95" in late and late["n_clusters"] <= 19
    board = leaderboard.collect([tmp_path / "guess" / "metrics.json"], "paper")
    assert list(board["run"]) == ["guess", "guess (uploaded after 2024-06-01)"]
    assert list(board["n"]) == [32, 19]
    _, rows = leaderboard.render_rows(board)
    assert rows[1][3] == "19 / 32"
    assert any("training cutoff" in n for n in leaderboard.table_notes(board))
    # without a cutoff, or without upload dates, metrics.json has no such block
    plain = evaluate_run("plain", tmp_path / "guess" / "predictions.jsonl", manifest,
                         tmp_path / "plain", config, info={"model": spec.model})
    assert "post_cutoff" not in plain["protocols"]["paper"]
    assert json.loads((tmp_path / "plain" / "metrics.json").read_text())["run"] == "plain"


def test_a_cutoff_that_is_not_a_date_is_one_line():
    from agl.contracts.models import parse_models
    from agl.errors import AglError

    with pytest.raises(AglError, match=r"models.x.training_cutoff: 'June' is not a date; write it as YYYY-MM-DD"):
        parse_models({"x": {"backend": "random", "training_cutoff": "June"}})


def test_the_report_puts_a_model_beside_its_blind_run_and_breaks_down_by_date(dated_demo, tmp_path):
    from agl.contracts.models import ModelSpec
    from agl.dataset.manifest import clips
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.prompts import load_prompt
    from agl.report.inputs import ReportInputs, ReportOptions, collect_runs, with_clusters
    from agl.report.sections import SectionContext
    from agl.report.sections.baselines import season, section
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    frame = load_manifest(dated_demo / "manifest.csv")
    frame["date"] = ["2002-02-07"] * 16 + ["2003"] * 8 + [""] * (len(frame) - 24)
    manifest = tmp_path / "manifest.csv"
    write_manifest(frame, manifest)
    config = EvaluateConfig(protocols=("paper",), metric_bootstrap=20, track=False)
    for run, backend, seed in (("gem", "gemini", 0), ("gem-blind", "blind", 1)):
        spec = ModelSpec(run, "random-sphere", "uniform-sphere", settings={"seed": seed})
        run_inference(spec, load_prompt(), clips(frame), out_dir=tmp_path / "runs" / run,
                      audio_root=None, options=RunOptions(progress=False))
        evaluate_run(run, tmp_path / "runs" / run / "predictions.jsonl", manifest, tmp_path / "runs" / run,
                     config, info={"model": "gemini-2.5-flash", "backend": backend})
    options = ReportOptions(group_bootstrap=20, paired_bootstrap=20, paired_permutations=20, min_support=1)
    runs = with_clusters(collect_runs([tmp_path / "runs"], "paper"), options.resampling_unit)
    (tmp_path / "tables").mkdir()
    ctx = SectionContext(runs, runs, ReportInputs(run_dirs=(tmp_path / "runs",), manifest=manifest),
                         options, tmp_path, tmp_path / "tables")
    page = section(ctx)
    assert "What the sound added" in page and "gem-blind (blind)" in page
    paired = pd.read_csv(tmp_path / "tables" / "sound_added.csv")
    assert set(paired["a"]) == {"gem"} and len(paired) == 3
    by_date = pd.read_csv(tmp_path / "tables" / "by_date_gem.csv", dtype={"group": str})
    years = by_date[by_date["breakdown"] == "recording year"].set_index("group")["n"].to_dict()
    assert years == {"2002": 16, "2003": 8, "no date": 8}
    seasons = by_date[by_date["breakdown"] == "season (where recorded)"]["group"].tolist()
    assert "no month" in seasons and set(seasons) <= {"winter", "summer", "no month"}
    # February is winter in Essaouira and summer in Sydney
    assert (season("2002-02-07", 31.5), season("2002-02-07", -33.9), season("2003", 10.0)) == (
        "winter", "summer", None)
    # the demo's runs (no run without audio, no date): no trace on the page
    plain = load_manifest(dated_demo / "manifest.csv")
    write_manifest(plain.drop(columns=["date"]), tmp_path / "plain.csv")
    bare = [r for r in runs if r.name == "gem"]
    assert section(SectionContext(bare, bare, ReportInputs(run_dirs=(), manifest=tmp_path / "plain.csv"),
                                  options, tmp_path, tmp_path / "tables")) is None
