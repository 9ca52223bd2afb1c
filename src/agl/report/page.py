"""The report page: the HTML of `report.html` from the analyses `agl.report.build` computed.

Sections in order: the leaderboard, then per data version the distance error, maps, error
modes, paired comparisons and per-run breakdowns, then any extra sections (birds,
counterfactuals) and the provenance. Tables and figures come from `agl.report.tables`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from agl.judges.modes import JudgeConfig, prompt_version
from agl.report import maps, tables
from agl.report.inputs import ReportOptions, RunInput
from agl.scoring.leaderboard import groups
from agl.scoring.leaderboard_table import html_cell, render_rows, table_notes
from agl.scoring.marks import SERVED_MARK, served_lines, served_note


def render_page(sections: list[tuple[str, list[RunInput], dict[str, Any]]], board: pd.DataFrame | None,
                options: ReportOptions, judge: JudgeConfig | None, provenance: dict[str, Any],
                leaderboard_csv: Path | None, extra_sections: Sequence[str] = ()) -> str:
    """The whole report.html: the leaderboard, one block of sections per data version (its
    analysis `a` from `agl.report.build`), the extra sections, then the provenance."""
    runs = [r.name for _, _, a in sections for r in a["order"]]
    data = str(provenance.get("dataset", ""))
    if len(sections) > 1:  # name every dataset the runs were scored on, not only the pipeline's
        data = "; ".join(str(g[0].info.get("dataset") or "unknown data") for _, g, _ in sections)
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             "<title>AGL1K report</title><style>", _CSS, "</style></head><body>",
             "<h1>AGL1K benchmark report</h1>",
             f"<p class='dataset'>Data: <b>{html.escape(data)}</b></p>",
             f"<p>Protocol: <b>{html.escape(options.protocol)}</b>. Runs: "
             f"{html.escape(', '.join(runs))}.</p>"]
    if len(sections) > 1:
        parts.append(f"<p>The runs were scored on {len(sections)} different datasets (data "
                     "versions): each has its own leaderboard, figures, breakdowns and paired "
                     "tests below; runs on different data are never compared.</p>")

    parts.append("<section id='leaderboard-section'><h2>Leaderboard</h2>")
    if board is not None and not board.empty:
        parts += leaderboard_html(board)
    else:
        where = html.escape(str(leaderboard_csv)) if leaderboard_csv else "no file given"
        parts.append(f"<p>No leaderboard ({where}); headline numbers per run:</p>")
        # Runs served by another model than asked: marked "§" as the leaderboard marks them.
        flagged = served_lines([Path(r.info["metrics"]) for _, _, a in sections for r in a["order"]
                                if r.info.get("metrics")])
        rows = [[r.name + (f" {SERVED_MARK}" if r.name in flagged else ""),
                 *(tables.with_ci(a["breakdowns"][r.name]["all"].iloc[0], c, d) for c, d in
                   (("mean_km", 1), ("country_acc", 3), ("continent_acc", 3)))]
                for _, _, a in sections for r in a["order"]]
        parts.append(tables.table(["run", "mean km", "country acc", "continent acc"], rows,
                            "leaderboard"))
        if flagged:
            note = served_note({run: "; ".join(flags) for run, flags in flagged.items()})
            parts.append(f"<p class='note'>{html.escape(note)}</p>")
    carriers = influence_lines([r for _, _, a in sections for r in a["order"]], options.protocol)
    if carriers:
        parts.append("<p>Clusters that carry more than params.yaml <code>evaluate.influence_share</code> "
                     "of a headline metric's cluster variance (one place deciding much of an "
                     "interval):</p><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in carriers)
                     + "</ul>")
    parts.append("</section>")
    for version, group, a in sections:
        if len(sections) > 1:
            info = group[0].info
            label = html.escape(str(info.get("dataset") or "unknown data"))
            parts.append(f"<section class='data-version' id='data-{html.escape(version[:12])}'>"
                         f"<h2 class='data-version'>Data: {label} (data version "
                         f"{html.escape(version[:12])})</h2>")
        parts.append(_render_data(a, options, judge))
        if len(sections) > 1:
            parts.append("</section>")

    parts.extend(extra_sections)
    parts.append("<section id='provenance'><h2>Provenance</h2>")
    rows = [[k, json.dumps(v, default=str) if not isinstance(v, str) else v]
            for k, v in provenance.items()]
    parts.append(tables.table(["what", "value"], rows, "provenance-table"))
    parts.append("</section></body></html>")
    return "\n".join(parts)


def leaderboard_html(board: pd.DataFrame) -> list[str]:
    """The report's leaderboard: its preamble, then one table per dataset with its notes."""
    parts: list[str] = []
    rendered = [(header, rows_of, *render_rows(rows_of)) for header, rows_of in groups(board)]
    paper = any("paper" in head for _, _, head, _ in rendered)
    parts.append("<p>Mean distance and accuracies with 95% bootstrap intervals that "
                 "resample each run's clusters of clips (its unit in the 'clusters' column; "
                 "docs/metrics.md#clusters); the design effect is Kish's: the variance "
                 "under the clusters over the variance were the clips independent (n clips "
                 "carry the information of n / deff; docs/metrics.md#design-effect)"
                 + ("; 'paper' columns are the values the AGL1K paper reports for the same "
                    "model" if paper else "") + ".</p>")
    for k, (header, rows_of, head, rows) in enumerate(rendered):
        if header:
            parts.append(f"<h3>{html.escape(header)}</h3>")
        # each interval under its value, as leaderboard.html sets it (fits 1,280 px)
        cells = [[tables.Html(html_cell(c)) for c in row] for row in rows]
        parts.append(tables.table(head, cells, "leaderboard" if k == 0 else f"leaderboard-{k + 1}")
                     .replace("<table ", "<table class='leaderboard' ", 1))
        parts += [f"<p class='note'>{html.escape(line)}</p>" for line in table_notes(rows_of)]
    return parts


def influence_lines(runs: list[RunInput], protocol: str) -> list[str]:
    """Per run, the clusters its metrics.json names as carrying more than the influence share
    of a headline metric's variance (agl.scoring.metrics.influential)."""
    out = []
    for r in runs:
        path = r.info.get("metrics")
        if not path or not Path(path).is_file():
            continue
        res = json.loads(Path(path).read_text(encoding="utf-8")).get("protocols", {}).get(protocol, {})
        for metric, found in (res.get("influential_clusters") or {}).items():
            if found:
                out.append(f"{r.name}, {metric}: " + "; ".join(
                    f"{c['cluster']} ({c['clips']} clips, {c['share']:.0%} of the variance)" for c in found))
    return out


def _render_data(a: dict[str, Any], options: ReportOptions, judge: JudgeConfig | None) -> str:
    """The sections of one dataset's runs (ids carry the data version when there are several)."""
    sfx = a["sfx"]
    tag = sfx.replace("_", "-")
    parts = [*_distance_html(a, options, tag), *_modes_html(a, options, judge, tag)]
    if not a["paired"].empty:
        parts.append(f"<section id='paired-section{tag}'><h2>Paired comparisons</h2><p>Best run "
                     "(lowest mean km) against each other run on their common clips: "
                     "difference A - B with a paired bootstrap 95% CI and a sign-flip "
                     f"permutation p-value, both by cluster ({options.resampling_unit}: whole "
                     "clusters resampled, each cluster's signs flipped together); detectable: the smallest "
                     "true difference these clips detect with 80% power at the 5% level (agl power); fewer than "
                     f"{options.min_support} common scored clips or clusters: \"insufficient data (n = k, needs "
                     f"{options.min_support})\", none: \"—\" (not applicable).</p>")
        parts.append(tables.paired_table(a["paired"], f"paired{tag}"))
        parts.append("</section>")

    parts.append(f"<section id='breakdowns-section{tag}'><h2>Breakdowns per run</h2>")
    parts.append(f"<p>{html.escape(tables.breakdown_legend(options.min_support))}</p>")
    if options.explorer:
        parts.append("<p>A group's name opens its clips in the clip explorer (written by "
                     "<code>agl explore --export build/explore</code>).</p>")
    for r in a["order"]:
        parts += _run_html(r.name, a, options)
    parts.append("</section>")
    return "\n".join(parts)


def _distance_html(a: dict[str, Any], options: ReportOptions, tag: str) -> list[str]:
    """The distance-error section and the maps section."""
    written, sfx = a["written"], a["sfx"]
    parts = [f"<section id='cdf-section{tag}'><h2>Distance error</h2>"]
    parts.append(tables.img(written[f"cdf{sfx}"], "Cumulative distribution of distance error "
                      "(marks at 1, 25, 200, 750, 2500 km)", f"cdf{tag}"))
    parts.append(tables.img(written[f"accuracy_by_continent{sfx}"], "Accuracy by true continent",
                      f"accuracy-by-continent{tag}"))
    parts.append("</section>")

    parts.append(f"<section id='map-section{tag}'><h2>Maps</h2>")
    for r in a["order"][: options.maps_for]:
        parts.append(tables.img(written[f"map_{r.name}"], f"{r.name}: true locations coloured by "
                          "error, and predicted points", f"map-{tables.slug(r.name)}"))
    parts.append("<h3>Interactive</h3><p>Hover a point: the clip, its true and predicted place "
                 "and the error; the line joins it to the prediction.</p>")
    for r in a["order"][: options.maps_for]:
        parts.append(f"<h4>{html.escape(r.name)}</h4>")
        parts.append(maps.svg_map(r.scored, svg_id=f"svgmap-{tables.slug(r.name)}"))
    parts.append("</section>")
    return parts


def _modes_html(a: dict[str, Any], options: ReportOptions, judge: JudgeConfig | None, tag: str) -> list[str]:
    """The error-modes section: who judged, the counts per run and their bars."""
    parts = [f"<section id='error-modes-section{tag}'><h2>Error modes</h2>"]
    judged = ("judge: " + html.escape(f"{judge.backend}/{judge.model}") + ", rubric "
              + prompt_version()) if judge else (
        "no judge configured: only Refusal and Failure are decided (from the record); the "
        "other six modes need a judge and those predictions are counted as 'Unjudged'")
    judged = judged[0].upper() + judged[1:]
    parts.append(f"<p>Wrong = refused, failed, or wrong country (distance &gt; "
                 f"{options.wrong_km:g} km where the country is not scored). {judged}.</p>")
    parts.append(tables.frame_table(a["mode_table"], f"error-modes{tag}", 0))
    parts.append(tables.img(a["written"][f"error_modes{a['sfx']}"],
                            "Error modes per run (share of wrong predictions)", f"error-modes-bars{tag}"))
    parts.append("</section>")
    return parts


def _run_html(name: str, a: dict[str, Any], options: ReportOptions) -> list[str]:
    """One run's breakdown tables, continent confusion and factors."""
    b, written = a["breakdowns"][name], a["written"]
    slug = tables.slug(name)
    parts = [f"<h3>{html.escape(name)}</h3>"]
    for key, title in (("all", "All clips"), ("speech", "Speech vs non-speech"),
                       ("category", "Sound category, non-speech clips (overlapping)"),
                       ("continent", "True continent"),
                       ("country", f"True country (>= {options.min_country_clips} clips)"),
                       ("status", "Prediction status"), ("calibration", "Self-reported confidence")):
        if key in b:
            parts.append(f"<h4>{html.escape(title)}</h4>")
            parts.append(tables.breakdown_table(
                b[key], f"{key}-{slug}", options.min_support,
                lambda kind, group, run=name: tables.explore_href(options.explorer, run, kind, group)))
    parts.append("<h4>Continent confusion (counts)</h4>")
    parts.append(tables.frame_table(b["confusion"], f"confusion-{slug}", 0))
    if f"confusion_{name}" in written:
        parts.append(tables.img(written[f"confusion_{name}"], f"{name}: continent confusion",
                                f"confusion-img-{slug}"))
    f = a["factors"][name]
    if not f.empty:
        parts += _factors_html(f, slug, options)
    return parts


def _factors_html(f: pd.DataFrame, slug: str, options: ReportOptions) -> list[str]:
    """The logistic regression of a correct country: its estimates, or why there are none."""
    fa = f.attrs
    parts = ["<h4>What predicts a correct country (logistic regression, "
             f"n = {fa.get('n')} scored clips, {fa.get('correct')} correct)</h4>"]
    if fa.get("insufficient"):
        parts.append(f"<p class='insufficient'>No factor estimated: "
                     f"{html.escape(fa['insufficient'])}. Counts only:</p>")
        f = f[["factor", "n_present", "n_correct_present"]]
    else:
        failed = fa.get("bootstrap_failed", 0)
        parts.append(f"<p>95% CIs from {fa.get('bootstrap')} of "
                     f"{fa.get('bootstrap_requested')} bootstrap fits; {failed} failed "
                     "(a resample held one outcome only, or the fit did not converge)"
                     + (": read the intervals with care" if failed else "") + ". A "
                     "factor needs at least "
                     f"{options.min_support} clips with and without it.</p>")
    parts.append(tables.frame_table(f, f"factors-{slug}", 3))
    return parts


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
td.insufficient,td.na{text-align:center;color:#7a4a00;font-style:italic}
table.leaderboard{font-size:12px} table.leaderboard td,table.leaderboard th{padding:3px 4px;white-space:normal}
table.leaderboard th{vertical-align:bottom}
span.ci{display:block;font-size:11px;color:#555;white-space:nowrap}
table.leaderboard td:nth-child(-n+3),table.leaderboard th:nth-child(-n+3){text-align:left}
div.scroll{overflow-x:auto;max-width:100%}
#provenance-table td{text-align:left;white-space:normal}
p.note{max-width:70em}
img{max-width:100%;height:auto} figure{margin:1em 0}
figcaption{font-size:13px;color:#555}
.no-chart,.insufficient{color:#7a4a00;font-style:italic}
.svgmap{max-width:100%;height:auto;border:1px solid #ccc}
.svgmap line{stroke:#d62728;stroke-width:1;visibility:hidden}
.svgmap g:hover line{visibility:visible} .svgmap g:hover circle{r:5;stroke:#000}
h2.data-version{border-top:4px solid #444;padding-top:0.5em;margin-top:2.5em;font-size:1.7em}
"""
