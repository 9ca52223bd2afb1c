"""The report's sections: discovered like the commands, one signature, shown in name order,
and no trace of a section whose input was not given."""

from __future__ import annotations

import numpy as np
import pandas as pd

from agl.report import sections
from agl.report.inputs import ReportInputs, ReportOptions, RunInput


def test_sections_are_discovered_in_name_order():
    names = [name for name, _ in sections.discover()]
    assert names == ["baselines", "birds", "counterfactual", "fairness", "sensitivity", "speech",
                     "stability", "tags"]
    assert all(callable(make) for _, make in sections.discover())


def test_no_input_no_section(tmp_path):
    scored = pd.DataFrame({"sample_id": ["a"], "distance_km": [10.0], "refused": [False], "failed": [False],
                           "country_correct": [np.nan]})
    ctx = sections.SectionContext(runs=[RunInput("r", scored)], pipeline_runs=[RunInput("r", scored)],
                                  inputs=ReportInputs(run_dirs=()), options=ReportOptions(),
                                  figs=tmp_path, tables=tmp_path)
    assert sections.render(ctx) == []
    missing = ReportInputs(run_dirs=(), birds_csv=tmp_path / "none.csv", sensitivity_csv=tmp_path / "none.csv",
                           counterfactual_dir=tmp_path)
    html = sections.render(sections.SectionContext(**{**ctx.__dict__, "inputs": missing}))
    assert len(html) == 2  # birds and counterfactual say their table is absent; the sweep is skipped
    assert "the birds stage did not run" in html[0] and "effects.csv absent" in html[1]


def test_the_tag_audit_section_counts_and_names_the_clips_that_give_their_place_away(tmp_path):
    from agl.dataset.tag_audit import AuditRow, Finding, write_table

    rows = [AuditRow("a", "a/x.mp3", ("ID3v2.3:COMM::eng",),
                     (Finding("city", "ID3v2.3 COMM::eng", "essaouira"),)),
            AuditRow("b", "b/PrestonStation.mp3", (), (Finding("city", "file name", "preston"),)),
            AuditRow("c", "c/y.mp3", (), ())]
    write_table(rows, tmp_path / "tag_audit.csv")
    scored = pd.DataFrame({"sample_id": ["a"], "distance_km": [1.0], "refused": [False],
                           "failed": [False], "country_correct": [1.0]})
    ctx = sections.SectionContext(runs=[RunInput("r", scored)], pipeline_runs=[],
                                  inputs=ReportInputs(run_dirs=(), manifest=tmp_path / "manifest.csv"),
                                  options=ReportOptions(), figs=tmp_path, tables=tmp_path / "t")
    (html,) = sections.render(ctx)
    assert "1 of 3 clips carry their place in their tags; 1 in their file name" in html
    assert "essaouira" in html and "PrestonStation" not in html.split("<table")[0]
    assert (tmp_path / "t" / "tag_audit.csv").read_text().count("\n") == 3  # header + 2 clips
