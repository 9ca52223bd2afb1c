"""Leaderboard: runs ranked, CIs shown, the paper's reported values beside matching rows."""

import json
import re

import pandas as pd
import pytest

from agl.dataset.paper import read_paper_leaderboard, resolve
from agl.scoring import leaderboard

README_TABLE = """
### Open-Source Models

| Model            | Distance Error ↓ | Cont. Acc. ↑ | Country Acc. ↑ | City Acc. ↑ |
| ---------------- | :--------------: | :----------: | :------------: | :---------: |
| 🥇 Gemini 3 Pro   |   **2180.57**    |   **0.82**   |    **0.51**    |  **0.11**   |
| Qwen2.5-Omni     |     5476.83      |     0.45     |      0.26      |    0.02     |

| Model  | Distance Error |
| ------ | :------------: |
| RANDOM |    9869.01     |
"""


def metrics_file(tmp_path, run, km, paper_name="", country=0.3):
    res = {"n": 10, "distance_error_km": km, "country_acc": country,
           "ci95": {"distance_error_km": [km - 100, km + 100], "country_acc": [0.2, 0.4]}}
    path = tmp_path / run / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"run": run, "model": run, "paper_name": paper_name,
                                "protocols": {"paper": res}}))
    return path


def test_readme_tables_are_parsed_including_bold_and_medals(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(README_TABLE, encoding="utf-8")
    paper = read_paper_leaderboard(path).set_index("model")
    assert paper.loc["Gemini 3 Pro", "distance_error_km"] == 2180.57
    assert paper.loc["Gemini 3 Pro", "city_acc"] == 0.11
    assert paper.loc["Qwen2.5-Omni", "country_acc"] == 0.26
    assert paper.loc["RANDOM", "distance_error_km"] == 9869.01 and pd.isna(paper.loc["RANDOM", "country_acc"])


def test_shared_csv_agrees_with_the_readme_format(shared, tmp_path):
    csv = read_paper_leaderboard(shared("data/agl1k/paper_leaderboard.csv")).set_index("model")
    assert csv.loc["Qwen2.5-Omni", "distance_error_km"] == 5476.83


def test_board_is_ranked_with_cis_and_paper_values(tmp_path):
    files = [metrics_file(tmp_path, "b", 6000.0), metrics_file(tmp_path, "a", 5476.83, "Qwen2.5-Omni")]
    board = leaderboard.collect(files, "paper")
    assert board["run"].tolist() == ["a", "b"]
    paper = pd.DataFrame([{"model": "qwen2.5-omni", "distance_error_km": 5476.83, "continent_acc": 0.45,
                           "country_acc": 0.26, "city_acc": 0.02}])
    board = leaderboard.attach_paper(board, paper)
    assert board.loc[0, "paper_distance_error_km"] == 5476.83 and pd.isna(board.loc[1, "paper_country_acc"])
    written = leaderboard.write(board, tmp_path / "out", protocol="paper")
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    # ‡: beside a paper value, run under no stated protocol (issue 32: not the paper's)
    assert "| 1 | a ‡ | a | 10 | 5476.83 [5377, 5577] | 5476.83 |" in md
    assert len(written) == 3 and "<table id='leaderboard'" in (tmp_path / "out" / "leaderboard.html").read_text()


def test_resolve_accepts_urls_and_folders(tmp_path):
    assert resolve("https://x.org/repo/", "/a/b.json") == "https://x.org/repo/a/b.json"
    assert resolve(str(tmp_path), "a.json") == (tmp_path / "a.json").resolve().as_uri()


def _versioned(tmp_path, run, km, version, clips, predicted, dataset):
    path = metrics_file(tmp_path, run, km)
    doc = json.loads(path.read_text())
    doc.update(data_version=version, dataset_clips=clips, clips_predicted=predicted, dataset=dataset)
    path.write_text(json.dumps(doc))
    return path


def test_one_table_per_data_version_and_subsets_ranked_after_full_runs(tmp_path):
    demo = "SYNTHETIC demo set (32 generated clips; not AGL1K recordings)"
    files = [
        _versioned(tmp_path, "knn", 3000.0, "d" * 64, 32, 32, demo),
        _versioned(tmp_path, "random", 9000.0, "d" * 64, 32, 32, demo),
        _versioned(tmp_path, "paper/gemini", 2000.0, "a" * 64, 1444, 263, "1444 clips"),
        _versioned(tmp_path, "paper/qwen", 5476.83, "a" * 64, 1444, 1442, "1444 clips"),
    ]
    board = leaderboard.collect(files, "paper", full_coverage=0.99)
    assert board["run"].tolist() == ["paper/qwen", "paper/gemini", "knn", "random"]
    assert board["rank"].tolist() == [1, 2, 1, 2] and board["subset"].tolist() == [False, True, False, False]
    leaderboard.write(leaderboard.attach_paper(board, None), tmp_path / "out", protocol="paper")
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    agl, demo_part = md.split("## SYNTHETIC")
    assert "1,444 clips, data version aaaaaaaaaaaa" in agl and "SYNTHETIC" not in agl
    assert "| 1 | paper/qwen | paper/qwen | 1442 / 1444 |" in agl
    assert "| 2 | paper/gemini * | paper/gemini | 263 / 1444 |" in agl and "not comparable" in agl
    assert "not AGL1K recordings), data version dddddddddddd" in demo_part
    assert "| 1 | knn | knn | 32 / 32 |" in demo_part
    assert "not comparable" not in demo_part
    page = (tmp_path / "out" / "leaderboard.html").read_text()
    assert page.count("class='leaderboard'") == 2


def test_paper_run_named_by_its_published_short_name():
    """`paper.runs` entries give a path, or name a pinned `paper.published` entry (whose
    SHA-256 the stage then checks); anything else is one clear error naming the fix."""
    from agl.dataset.paper import run_source
    from agl.errors import AglError

    published = {"qwen25-omni": {"path": "results/q/seed_42.json", "sha256": "ab" * 32}}
    assert run_source({"published": "qwen25-omni"}, published) == ("qwen25-omni", "results/q/seed_42.json")
    assert run_source({"published": "qwen25-omni", "name": "q"}, published) == ("q", "results/q/seed_42.json")
    assert run_source({"name": "x", "path": "results/x.json"}, published) == ("x", "results/x.json")
    with pytest.raises(AglError, match="published 'qwen3' is not a key of paper.published \\(qwen25-omni\\)"):
        run_source({"published": "qwen3"}, published)
    with pytest.raises(AglError, match="needs a name and a path"):
        run_source({"name": "x"}, published)


def test_a_run_refusing_more_than_max_refused_is_listed_unranked(tmp_path):
    """On the demo, langprior refused all 32 clips and ranked second, above both random
    baselines, on the paper's fixed 10,000 km per refusal."""
    demo = "SYNTHETIC demo set (32 generated clips; not AGL1K recordings)"
    files = []
    for run, km, reject in (("knn", 8401.1, 0.0), ("langprior", 10000.0, 1.0), ("random", 11163.3, 0.0),
                            ("half", 10500.0, 0.5)):
        path = _versioned(tmp_path, run, km, "d" * 64, 32, 32, demo)
        doc = json.loads(path.read_text())
        doc["protocols"]["paper"]["reject_rate"] = reject
        path.write_text(json.dumps(doc))
        files.append(path)
    board = leaderboard.collect(files, "paper", max_refused=0.5)
    assert board["run"].tolist() == ["knn", "half", "random", "langprior"]
    assert board["rank"].tolist()[:3] == [1, 2, 3] and pd.isna(board["rank"].iloc[3])  # 0.5 itself is ranked
    leaderboard.write(leaderboard.attach_paper(board, None), tmp_path / "out", protocol="paper")
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| unranked (100% rejected) | langprior | langprior | 32 / 32 | 10000.00" in md
    assert md.index("| 3 | random") < md.index("| unranked (100% rejected) | langprior")
    assert "Unranked: langprior: rejected more than the share leaderboard.max_refused" in md
    # an unranked run has no rank: no note speaks of one for it (half is ranked, not heavy
    # enough to be unranked, and gets the rank note)
    unranked_note = next(line for line in md.splitlines() if line.startswith("Unranked:"))
    assert not re.search(r"\brank\b", unranked_note)
    rank_note = next(line for line in md.splitlines() if line.startswith("A rank marked"))
    assert "langprior" not in rank_note and "half rejected 5 of 10 clips" in rank_note
    csv = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert csv.set_index("run").loc["langprior", "unranked"] and pd.isna(csv.set_index("run").loc["langprior", "rank"])


def test_served_flags_mark_only_their_run_and_a_bad_summary_is_one_line(tmp_path):
    """A run's served-model flags (its tracked run_summary.json) mark that run's row and add a
    `served_flags` column; a board without any has no such column; a summary that is not
    JSON, or whose flags are not lines, is one error naming the file, never skipped."""
    from agl.errors import AglError

    files = [metrics_file(tmp_path, "a", 5000.0), metrics_file(tmp_path, "b", 6000.0)]
    assert "served_flags" not in leaderboard.collect(files, "paper")
    (tmp_path / "a" / "run_summary.json").write_text(json.dumps({"model": "a"}))  # no served ids
    (tmp_path / "b" / "run_summary.json").write_text(json.dumps({"served_flags": ["served 'x'"]}))
    board = leaderboard.collect(files, "paper")
    assert board["served_flags"].isna().tolist() == [True, False] and list(board)[-1] == "refusal_heavy"
    head, rows = leaderboard.render_rows(board)
    assert [r[1] for r in rows] == ["a", "b §"]
    assert any("b: served 'x'" in n for n in leaderboard.table_notes(board))
    for text, what in (("{", "not readable JSON"), ('{"served_flags": "x"}', "not a list of lines")):
        (tmp_path / "b" / "run_summary.json").write_text(text)
        with pytest.raises(AglError, match=re.escape(str(tmp_path / "b" / "run_summary.json")) + ".*" + what):
            leaderboard.collect(files, "paper")


def test_a_server_that_heard_less_than_sent_marks_its_run(tmp_path):
    """A run whose provider reported hearing less audio than it was sent (run_summary.json's
    `heard_flag`, agl.inference.summary) is marked like a served-model flag, with its line."""
    from agl.errors import AglError

    files = [metrics_file(tmp_path, "a", 5000.0), metrics_file(tmp_path, "b", 6000.0)]
    line = "the server heard 30 s of 130 (median of 1 of 1 clip(s) ...)"
    (tmp_path / "b" / "run_summary.json").write_text(json.dumps({"heard_flag": line}))
    board = leaderboard.collect(files, "paper")
    assert [r[1] for r in leaderboard.render_rows(board)[1]] == ["a", "b §"]
    assert any(f"b: {line}" in n for n in leaderboard.table_notes(board))
    (tmp_path / "b" / "run_summary.json").write_text(json.dumps({"heard_flag": 30}))
    with pytest.raises(AglError, match="heard_flag is not a line"):
        leaderboard.collect(files, "paper")


MEASURE = """() => { const d = document.querySelector('div.scroll');
                return {page: document.documentElement.scrollWidth, window: window.innerWidth,
                        box: d.clientWidth, table: d.scrollWidth,
                        cols: document.querySelectorAll('#leaderboard thead th').length,
                        ci: getComputedStyle(document.querySelector('#leaderboard span.ci')).display,
                        run: getComputedStyle(document.querySelector('#leaderboard td:nth-child(2)')).textAlign,
                        km: getComputedStyle(document.querySelector('#leaderboard td:nth-child(5)')).textAlign}; }"""


def test_the_page_keeps_a_laptops_width_and_names_read_left(tmp_path):
    """leaderboard.html in Chromium at 1280 px: its columns (the paper's beside ours: 18) fit the
    window, no sideways scroll (issue 50: they scrolled in their box; before that the page
    itself widened), each interval under its value; run and model names are left-aligned like
    the report's, and no empty paragraph stands under the title."""
    from helpers import require_chromium

    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    files = [metrics_file(tmp_path, f"a-long-run-name-{i}", 6000.0 + i, "Qwen2.5-Omni") for i in range(3)]
    for i, path in enumerate(files):  # every column filled, at AGL1K's widths
        doc = json.loads(path.read_text())
        res = doc["protocols"]["paper"]
        res.update(n=1442, median_km=13397.9, geoscore=118.6, reject_rate=0.0, n_clusters=698,
                   resampling_unit="site:25", distance_error_km=11773.13 + i,
                   design_effect={"distance_error_km": 1.52, "country_acc": 15.35},
                   **{m: 0.123 for m in ("continent_acc", "country_acc", "city_acc")})
        res["ci95"] = {"distance_error_km": [10176.72, 13259.55],
                       **{m: [0.034, 0.256] for m in ("continent_acc", "country_acc", "city_acc")}}
        doc.update(dataset_clips=1444, clips_predicted=1442)
        path.write_text(json.dumps(doc))
    paper = pd.DataFrame([{"model": "qwen2.5-omni", "distance_error_km": 5476.83, "continent_acc": 0.45,
                           "country_acc": 0.26, "city_acc": 0.02}])
    board = leaderboard.attach_paper(leaderboard.collect(files, "paper"), paper)
    leaderboard.write(board, tmp_path / "out", protocol="paper")
    page_file = tmp_path / "out" / "leaderboard.html"
    assert "<p></p>" not in page_file.read_text()
    # the report's leaderboard section under the report's own style (issue 43: it scrolled
    # sideways at 1,280 px where leaderboard.html fitted)
    from agl.report import page as report_page

    report_file = tmp_path / "report.html"
    report_file.write_text("<!doctype html><meta charset='utf-8'><style>" + report_page._CSS + "</style><body>"
                           + "".join(report_page.leaderboard_html(board)) + "</body>")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            boxes = []
            for shown in (page_file, report_file):
                page.goto(shown.as_uri())
                boxes.append(page.evaluate(MEASURE))
        finally:
            browser.close()
    for box in boxes:  # leaderboard.html, then the report's copy of the table
        assert box["page"] <= box["window"], box
        assert box["table"] <= box["box"] and box["cols"] >= 17, box  # every column, no sideways scroll
        assert box["ci"] == "block", box  # the interval on its own line under the value
        assert (box["run"], box["km"]) == ("left", "right"), box


def test_a_median_at_the_refusal_distance_reads_refused(tmp_path):
    """A run whose median is the paper's 10,000 km (most clips without coordinates) shows
    "refused" in the leaderboard's median column, not a distance."""
    from agl.scoring.leaderboard import collect, render_rows

    paths = []
    for name, median, flag in (("a", 800.0, False), ("b", 10_000.0, True)):
        res = {"n": 10, "distance_error_km": median, "median_km": median, "median_refused": flag,
               "reject_rate": 0.0, "ci95": {}}
        path = tmp_path / name / "metrics.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"run": name, "protocols": {"paper": res}}))
        paths.append(path)
    head, rows = render_rows(collect(paths, "paper"))
    assert [r[head.index("median km")] for r in rows] == ["800.00", "refused"]


def test_a_mean_made_only_of_refusals_reads_refused(tmp_path):
    """The demo's langprior (32 of 32 clips without coordinates) showed `10000.00 [10000,
    10000]`: a mean of the protocol's fixed distance alone is no distance; one clip with
    coordinates makes it a mean again."""
    from agl.report.tables import _refused
    from agl.scoring.leaderboard import collect, render_rows

    paths = []
    for name, none in (("all", 10), ("most", 9)):
        res = {"n": 10, "n_no_coordinates": none, "distance_error_km": 10_000.0 - 10 * (10 - none),
               "median_km": 10_000.0, "median_refused": True, "reject_rate": none / 10,
               "ci95": {"distance_error_km": [9_900.0, 10_000.0]}}
        path = tmp_path / name / "metrics.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"run": name, "protocols": {"paper": res}}))
        paths.append(path)
    head, rows = render_rows(collect(paths, "paper"))
    km = head.index("distance km [95% CI]")
    assert {r[1]: r[km] for r in rows} == {"all": "refused", "most": "9990.00 [9900, 10000]"}
    # the report's breakdown rows: every resample's mean at the fixed distance
    group = pd.Series({"median_refused": True, "median_km": 10_000.0, "mean_km_lo": 10_000.0, "mean_km_hi": 10_000.0})
    assert _refused(group, "mean_km") and not _refused(group.mask(group.index == "mean_km_lo", 9_900.0), "mean_km")


def _scored(tmp_path, run, distances):
    """A run's metrics.json (its mean distance) and its per-clip scores_paper.csv beside it."""
    path = metrics_file(tmp_path, run, sum(distances) / len(distances))
    pd.DataFrame({"sample_id": [f"c{i}" for i in range(len(distances))], "distance_km": distances,
                  "true_lat": [10.0 * i for i in range(len(distances))],
                  "true_lon": [0.0] * len(distances)}).to_csv(path.parent / "scores_paper.csv", index=False)
    return path


def test_identical_runs_tie_and_the_next_run_takes_its_place_in_the_count(tmp_path):
    """Two runs of the same answers on every clip (the demo's knn and a knn-windows entry, once:
    the long clip's windows all named its place) were ranked 1 and 2 (and told apart by their
    rank intervals, 1 [1] and 2 [2]). Equal means share the better
    rank, competition style: 1, 1, 3, in the point rank, the rank interval and group, the .md,
    the .csv and the rank the track stage logs; a board without ties is ranked as before."""
    from agl.tracking.pipeline import leaderboard_ranks

    same = [100.0, 3000.0, 250.0, 8000.0, 40.0, 1200.0]
    files = [_scored(tmp_path, "twin-b", same), _scored(tmp_path, "twin-a", same),
             _scored(tmp_path, "other", [d + 5000.0 for d in same])]
    board = leaderboard.collect(files, "paper", rank_bootstrap=200)
    assert board["run"].tolist() == ["twin-a", "twin-b", "other"]
    assert board["rank"].tolist() == [1, 1, 3]
    assert board["rank_lo"].tolist() == [1, 1, 3] and board["rank_hi"].tolist() == [1, 1, 3]
    assert board["rank_group"].tolist() == [1, 1, 2]
    leaderboard.write(board, tmp_path / "out", protocol="paper")
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    for rank, run in ((1, "twin-a"), (1, "twin-b"), (3, "other")):
        assert re.search(rf"^\| {rank} \| {run} \|.*\| {rank} \[{1 if rank == 1 else 2}\] \|$", md, re.M), run
    assert ">1</td><td>twin-b<" in (tmp_path / "out" / "leaderboard.html").read_text()
    assert "share a rank and the next run takes its place in the count" in md and ": twin-a, twin-b." in md
    logged = leaderboard_ranks(tmp_path / "out" / "leaderboard.csv")
    assert sorted(logged.values()) == [1, 1, 3]
    # no tie: one place each, as before (one clip apart is not a tie)
    files[0] = _scored(tmp_path / "b", "twin-b", [*same[:-1], same[-1] + 0.001])
    board = leaderboard.collect(files, "paper", rank_bootstrap=200)
    assert board["run"].tolist() == ["twin-a", "twin-b", "other"] and board["rank"].tolist() == [1, 2, 3]
    assert not any("share a rank" in n for n in leaderboard.table_notes(board))
