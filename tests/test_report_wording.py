"""What the report's and the leaderboard's tables print: the n behind an estimate said once
(the n column, else the column header, else the cell), one wording for "not applicable" ("—")
and for "insufficient data (n = k, needs m)" in the leaderboard, the breakdowns, the birds
tables, the paired tables, the counterfactual table and the sensitivity table, and a
refusal-heavy run's rank carrying its refusal rate with a note."""

from __future__ import annotations

import html
import json
import math
import re

import numpy as np
import pandas as pd
from factories import manifest, prediction

from agl.counterfactual.effects import paired_effects
from agl.curation.sensitivity import section as sensitivity_section
from agl.curation.sensitivity import sweep_table
from agl.predictions.records import Status
from agl.report import analysis
from agl.report.build import build_report
from agl.report.inputs import ReportInputs, ReportOptions, RunInput
from agl.report.sections.birds import birds_section
from agl.report.sections.counterfactual import listen_section
from agl.report.tables import breakdown_table, paired_table
from agl.scoring import leaderboard
from agl.scoring.evaluate import score_run
from agl.scoring.paired import paired_test
from agl.scoring.wording import NOT_APPLICABLE, NOT_APPLICABLE_LEGEND

OPTS = ReportOptions(group_bootstrap=20, factor_bootstrap=5, paired_bootstrap=20, paired_permutations=20,
                     maps_for=0, min_support=10)


def _cells(page: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    """(header texts, rows of raw <td> elements) of one table of a page."""
    body = re.search(rf"<table id='{table_id}'.*?</table>", page, flags=re.S).group(0)
    head = re.findall(r"<th>(.*?)</th>", body)
    rows = [re.findall(r"<td[^>]*>.*?</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", body)[1:]]
    return head, rows


def _text(td: str) -> str:
    return re.sub(r"<[^>]+>", "", td)


def _breakdown(rows: list[dict]) -> pd.DataFrame:
    """Breakdown rows as analysis.group_row gives them, with chosen counts."""
    out = []
    for r in rows:
        n = r["n"]
        row = {"breakdown": "x", "group": r["group"], "n": n, "n_km": r.get("n_km", n),
               "mean_km": 5000.0, "mean_km_lo": 4000.0, "mean_km_hi": 6000.0, "median_km": 4800.0}
        for lv in ("continent", "country", "city"):
            row[f"{lv}_n"] = r.get(f"{lv}_n", n)
            row.update({f"{lv}_acc": 0.5, f"{lv}_acc_lo": 0.4, f"{lv}_acc_hi": 0.6})
        for name in ("reject", "failure"):
            row.update({f"{name}_rate": 0.0, f"{name}_rate_lo": 0.0, f"{name}_rate_hi": 0.0})
        out.append(row)
    return pd.DataFrame(out)


def test_n_is_said_once_row_column_or_cell():
    # Every estimate over its row's clips: no cell and no header repeats n (main: "(n = 32)" in
    # all seven cells, wrapping each to two or three lines).
    page = breakdown_table(_breakdown([{"group": "all", "n": 32}]), "t", 10)
    head, rows = _cells(page, "t")
    assert "(n = " not in page and rows[0][1] == "<td>32</td>"
    assert rows[0][2] == "<td>5,000.0 [4,000.0, 6,000.0]</td>"
    # The country scored on 30 clips of each row of 32: said once, in the column header.
    page = breakdown_table(_breakdown([{"group": "a", "n": 32, "country_n": 30},
                                       {"group": "b", "n": 40, "country_n": 30}]), "t", 10)
    head, rows = _cells(page, "t")
    assert "country acc (n = 30)" in head and "continent acc" in head
    assert page.count("(n = ") == 1
    # No single number for the column: the cell says it, only where it is not the row's n.
    page = breakdown_table(_breakdown([{"group": "a", "n": 32, "country_n": 30},
                                       {"group": "b", "n": 20}]), "t", 10)
    head, rows = _cells(page, "t")
    assert "country acc" in head
    assert rows[0][5] == "<td>0.500 [0.400, 0.600] (n = 30)</td>" and "(n = " not in "".join(rows[1])
    # A breakdown without a group (no non-speech clip holds a category): its header alone.
    head, rows = _cells(breakdown_table(pd.DataFrame(), "t", 10), "t")
    assert head[:3] == ["group", "n", "mean km [95% CI]"] and rows == []


def test_not_applicable_and_insufficient_read_one_way():
    frame = _breakdown([{"group": "big", "n": 26, "continent_n": 0, "country_n": 0, "city_n": 0},
                        {"group": "small", "n": 6, "continent_n": 0, "country_n": 0, "city_n": 0}])
    _, rows = _cells(breakdown_table(frame, "t", 10), "t")
    na3 = f"<td colspan='3' class='na'>{NOT_APPLICABLE}</td>"
    assert rows[0][4] == na3  # not attempted: "—", never "insufficient data (n = 0, needs ...)"
    # Every estimate of a row withheld, for two reasons (too few clips; not applicable): each
    # said once across the columns it covers.
    few = "<td colspan='2' class='insufficient'>insufficient data (n = 6, needs 10)</td>"
    assert rows[1][2:] == [few, na3, few]
    # The same n = 0 in a paired comparison is "—", not "not scored on any common clip".
    assert paired_test([np.nan] * 4, [1.0] * 4, min_n=10).note == NOT_APPLICABLE
    assert paired_test([1.0] * 4, [0.0] * 4, min_n=10).note == (
        "insufficient data (n = 4, needs 10)")


def _runs() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """32 clips; a full answer, a coordinates-only guess (no text fields) and refusals."""
    m = manifest([{"latitude": -40.0 + 2.5 * i, "longitude": -150.0 + 9.0 * i,
                   "human_sounds": float(i < 4)} for i in range(32)])  # 4 speech clips
    full = [prediction(k, 40.0, 2.0, "Paris", "France", "Europe") for k in m["key"]]
    coords = [prediction(k, 10.0, 10.0) for k in m["key"]]
    refused = [prediction(k, status=Status.REFUSED, refused=True) for k in m["key"]]
    return tuple(score_run(m, p, "paper") for p in (full, coords, refused))


def test_birds_tables_use_the_reports_wording_and_minimum_support(tmp_path):
    """Main printed "insufficient data (n = 0, needs 1)" for a coordinates-only run (the
    leaderboard: "—") and estimated the 6 clips BirdNET never heard although min_support
    is 10."""
    full, coords, _ = _runs()
    birds = tmp_path / "birds.csv"
    keys = list(full["sample_id"])
    pd.DataFrame({"key": keys, "status": ["ok"] * 26 + ["missing"] * 6,
                  "birds_heard": [False] * 32}).to_csv(birds, index=False)
    page = birds_section([RunInput("full", full), RunInput("random", coords)], birds, tmp_path,
                         tmp_path, options=OPTS)
    assert "needs 1)" not in page and "(n = 0" not in page
    _, rows = _cells(page, "birds-random")
    assert [_text(c) for c in rows[0][:2]] == ["no birds heard", "26"]
    assert rows[0][4] == f"<td colspan='3' class='na'>{NOT_APPLICABLE}</td>"
    _, rows = _cells(page, "birds-full")
    assert rows[1][:2] == ["<td>not listened</td>", "<td>6</td>"]
    assert rows[1][2:] == ["<td colspan='7' class='insufficient'>insufficient data (n = 6, needs 10)</td>"]
    assert html.escape(NOT_APPLICABLE_LEGEND) in page


def test_paired_and_counterfactual_tables_say_not_applicable_the_same_way(tmp_path):
    full, coords, _ = _runs()
    cmp = analysis.compare_runs(full, coords, n_boot=20, n_perm=20, min_support=10)
    page = paired_table(cmp.assign(a="full", b="random"), "p")
    _, rows = _cells(page, "p")
    by_metric = {_text(r[2]): r for r in rows}
    # n clips, n clusters (issue 31), then the note across the estimates
    assert by_metric["country_correct"][5:] == [f"<td colspan='5' class='na'>{NOT_APPLICABLE}</td>"]
    assert by_metric["distance_km"][7].startswith("<td>")
    # The counterfactual stage's effects on the same kind of run: "—" in its CSV note and table.
    effects = paired_effects(coords, coords, n_boot=20, n_perm=20, min_support=10)
    assert set(effects.loc[effects["metric"] == "country_correct", "note"]) == {NOT_APPLICABLE}
    effects.assign(model="random", intervention="none", kind="none", level="default",
                   value=np.nan).to_csv(tmp_path / "effects.csv", index=False)
    page = listen_section(tmp_path / "effects.csv", tmp_path, tmp_path)
    head, rows = _cells(page, "listen-table")
    # the group's n (and its clusters) in its own column, not "all (n = 32)"
    assert head[3:6] == ["group", "n", "clusters"]
    country = [r for r in rows if _text(r[6]) == "country_correct"]
    assert country and all(r[7:] == [f"<td colspan='4' class='na'>{NOT_APPLICABLE}</td>"]
                           for r in country)
    speech = [r for r in rows if _text(r[3]) == "speech" and _text(r[6]) == "distance_km"]
    assert speech[0][7] == "<td colspan='4' class='insufficient'>insufficient data (n = 4, needs 10)</td>"
    assert html.escape(NOT_APPLICABLE_LEGEND) in page


def _metrics(tmp_path, run, km, reject, n=32, acc=0.1) -> object:
    res = {"n": n, "distance_error_km": km, "median_km": km, "geoscore": 10.0,
           "reject_rate": reject, "n_rejected": round(reject * n),
           "n_no_coordinates": round(reject * n), "continent_acc": acc, "country_acc": acc, "city_acc": acc,
           "ci95": {"distance_error_km": [km - 100, km + 100]}}
    path = tmp_path / "runs" / run / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"run": run, "model": run, "protocols": {"paper": res},
                                "data_version": "d" * 64, "dataset_clips": n,
                                "clips_predicted": n, "dataset": "demo"}))
    return path


def test_a_refusal_heavy_rank_carries_its_refusal_rate_and_a_note(tmp_path):
    """birdrange refuses all 32 demo clips and ranks #2 at 10,000 km, above both random
    baselines: its rank says so, with the paper's rule, in the .md, the .html and the report."""
    files = [_metrics(tmp_path, "knn", 8401.11, 0.0), _metrics(tmp_path, "birdrange", 10000.0, 1.0),
             _metrics(tmp_path, "random", 11163.33, 0.0, acc=math.nan),
             _metrics(tmp_path, "hedger", 9500.0, 0.05)]
    # max_refused 1.0: ranked despite refusing everything (by default it would be listed
    # unranked: test_leaderboard), so the marker beside its rank is what is checked here.
    board = leaderboard.collect(files, "paper", refusal_note=0.1, max_refused=1.0)
    assert board["refusal_heavy"].tolist() == [False, False, True, False]  # knn, hedger, birdrange
    leaderboard.write(leaderboard.attach_paper(board, None), tmp_path / "out", protocol="paper")
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| 3 (100% rejected) | birdrange |" in md and "| 2 | hedger |" in md
    note = ("birdrange rejected 32 of 32 clips, 32 of them without coordinates): the paper "
            "protocol scores a clip without coordinates as 10,000 km (the paper's rule), so that "
            "rank comes in part from the rule")
    assert note in md
    assert NOT_APPLICABLE_LEGEND in md  # random's accuracies
    page = (tmp_path / "out" / "leaderboard.html").read_text()
    assert "<td>3 (100% rejected)</td><td>birdrange</td>" in page and html.escape(note) in page
    full, _, refused = _runs()
    report = build_report([RunInput("knn", full), RunInput("birdrange", refused)],
                          tmp_path / "report", options=OPTS,
                          inputs=ReportInputs(run_dirs=(), leaderboard_csv=tmp_path / "out" / "leaderboard.csv"))
    text = (tmp_path / "report" / "report.html").read_text()
    assert report["runs"] and "<td>3 (100% rejected)</td>" in text and html.escape(note) in text


def test_leaderboard_paper_cells_are_blank_without_a_paper_row():
    """Blank: the paper has no row for the run; "—": the paper's row gives no value."""
    def row(run: str, paper_km: float) -> dict:
        return {"run": run, "model": run, "n": 32, "rank": 1,
                **{c: 1.0 for c in leaderboard.COLUMNS},
                **{f"{c}_{s}": 1.0 for c in leaderboard.COLUMNS for s in ("lo", "hi")},
                **{f"paper_{c}": math.nan for c in leaderboard.PAPER_COLUMNS},
                "paper_distance_error_km": paper_km}

    head, (cells,) = leaderboard.render_rows(pd.DataFrame([row("knn", math.nan)]))
    assert "paper" not in head and "paper km" not in head  # no run has a paper row: no columns
    head, rows = leaderboard.render_rows(pd.DataFrame([row("knn", math.nan),
                                                       row("random", 9869.01)]))
    at = [i for i, h in enumerate(head) if h.startswith("paper")]
    assert [rows[0][i] for i in at] == ["", "", "", ""]
    assert [rows[1][i] for i in at] == ["9869.01", NOT_APPLICABLE, NOT_APPLICABLE, NOT_APPLICABLE]


def test_sensitivity_table_shows_no_rank_correlation_for_an_empty_selection():
    rows = [{"gamma_km": g, "theta": 0.0, "selected": sel, "jaccard": jac, "speech_share": share,
             "rank_rho": rho, "holdout_rho": 0.2, "experiment": f"e{g}", "status": "ok"}
            for g, sel, jac, share, rho in ((5000.0, 10, 1.0, 0.5, 1.0),
                                            (10000.0, 0, 0.0, None, -0.576698))]
    page = sensitivity_section(sweep_table(rows), None)
    cells = re.findall(r"<tr>(.*?)</tr>", page)[1:]
    empty = re.findall(r"<td>(.*?)</td>", cells[1])
    assert empty[2] == "0" and empty[4] == NOT_APPLICABLE and empty[5] == NOT_APPLICABLE
    assert "-0.576698" not in page and "selects no clip" in page
    assert re.findall(r"<td>(.*?)</td>", cells[0])[5] == "1.0"


def test_a_paired_row_whose_interval_and_p_value_disagree_says_why():
    """Issue 50: an interval excluding 0 beside p = 0.054, with no word on why. Such a row is
    marked and the table explains the two procedures once; agreeing rows are not marked."""
    from agl.report.tables import SPLIT_MARK, SPLIT_NOTE

    def row(lo, hi, p):
        return {"a": "x", "b": "y", "metric": "distance_km", "n": 400, "n_clusters": 120,
                "mean_a": 5000.0, "mean_b": 5400.0, "diff": -400.0, "ci_lo": lo, "ci_hi": hi,
                "p_value": p, "note": "", "detectable": 390.0}

    page = paired_table(pd.DataFrame([row(-790.0, -12.0, 0.054), row(-790.0, -12.0, 0.01),
                                      row(-790.0, 20.0, 0.2), row(-790.0, 20.0, 0.03)]), "p")
    _, rows = _cells(page, "p")
    assert [_text(r[8]) for r in rows] == [f"0.0540{SPLIT_MARK}", "0.0100", "0.2000", f"0.0300{SPLIT_MARK}"]
    assert page.count(html.escape(SPLIT_NOTE)) == 1
    agreeing = paired_table(pd.DataFrame([row(-790.0, -12.0, 0.01)]), "q")
    assert SPLIT_MARK not in agreeing and html.escape(SPLIT_NOTE) not in agreeing
