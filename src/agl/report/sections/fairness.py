"""The report's section "Who the models fail": groups, disparity and magnets.

For the best `report.maps_for` runs on the pipeline's data (best first):

* accuracy by the recording place's World Bank income level and UN region
  (agl.scoring.groups: intervals resample countries; groups under `report.min_support`
  clips pooled, income levels with their neighbours in order, and marked *; a pool still
  under it, or the unlisted countries, withheld as "insufficient data");
* the disparity per metric: worst and best group, gap and ratio with intervals;
* a covariate regression of country-correct (agl.report.covariate_model: income, density,
  language resources, speech, clip length; odds ratios with country-bootstrap intervals);
* magnets (agl.scoring.magnets): the countries the run names more often than they are the
  truth, with the over-prediction ratio (withheld where the country is the truth of fewer
  than `min_support` clips), the spread (entropy) of its answers per true country, and a
  world map of over-prediction: one circle per named country at its centroid (hdx's
  taxonomy), its area the times named, red where named more often than true, blue less,
  grey where no ratio stands.

Tables are written to `tables/fairness-<run>.csv`, `tables/magnets-<run>.csv` and
`tables/covariates-<run>.csv`. None (no
trace on the page) while no run is on the pipeline's data.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import pandas as pd

from agl.core import canonical, worldmap
from agl.dataset.manifest_cache import load_manifest_cached
from agl.report.covariate_model import covariate_model
from agl.report.sections import SectionContext
from agl.report.tables import Html, gap_cell, number, slug, table
from agl.scoring import covariates
from agl.scoring.groups import GroupSpec, by_group
from agl.scoring.magnets import magnets, spread
from agl.scoring.wording import insufficient

BYS = ("income", "region")
SHOWN = 10  # magnets and spread rows per run
INTRO = ("Who the models fail, by where the clip was recorded: the recording place's country "
         "(by its coordinates, so Taiwan's clips are Taiwan's) gives the World Bank income level "
         "and the UN region ({source}). Intervals resample whole countries; groups under "
         "{min_support} clips are pooled with their neighbours (marked *), and a group still under "
         "it is withheld. The disparity names the worst and best group of each metric, their gap "
         "(best minus worst) and ratio (best / worst; mean km: worst / best, WorldBench's), with "
         "intervals. Magnets are the countries a run names more often than they are the truth.")


def _ci(value: float | None, ci: list[float] | None, digits: int) -> str:
    if value is None:
        return "—"
    text = number(float(value), digits)
    return f"{text} [{number(ci[0], digits)}, {number(ci[1], digits)}]" if ci else text


def _groups_table(t: dict[str, Any], table_id: str) -> str:
    clusters = all("n_clusters" in g for g in t["groups"])
    head = ["group", "n", "countries", *(["clusters"] if clusters else []), "country acc",
            "continent acc", "mean km"]
    rows = []
    for g in t["groups"]:
        name = g["group"] + (" *" if g["pooled"] else "")
        counts = [f"{g['n']:,}", str(g["n_countries"]), *([str(g["n_clusters"])] if clusters else [])]
        if "withheld" in g:
            rows.append([name, *counts, gap_cell(g["withheld"], 3)])
            continue
        rows.append([name, *counts, _ci(g["country_acc"], g["country_acc_ci95"], 3),
                     _ci(g["continent_acc"], g["continent_acc_ci95"], 3),
                     _ci(g["distance_error_km"], g["distance_error_km_ci95"], 0)])
    return table(head, rows, table_id)


def _disparity_table(t: dict[str, Any], table_id: str) -> str:
    rows = []
    for metric, d in t["disparity"].items():
        if "withheld" in d:
            rows.append([metric, gap_cell(d["withheld"], 4)])
            continue
        digits = 0 if metric.endswith("_km") else 3
        rows.append([metric, d["worst"] or "— (every group the same)", d["best"] or "—",
                     _ci(d["gap"], d["gap_ci95"], digits),
                     _ci(d["ratio"], d["ratio_ci95"], 2)])
    return table(["metric", "worst", "best", "gap", "ratio"], rows, table_id)


def _magnet_rows(frame: pd.DataFrame, min_support: int) -> list[list]:
    rows = []
    for r in frame.head(SHOWN).itertuples(index=False):
        if r.true == 0:
            ratio: Any = gap_cell("never the truth")
        elif r.withheld:
            ratio = gap_cell(insufficient(int(r.true), min_support, " true"))
        else:
            ratio = f"{r.ratio:.2f}"
        rows.append([r.country, f"{r.predicted:,}", f"{r.true:,}", f"{r.excess:+,}", ratio])
    return rows


def _spread_rows(frame: pd.DataFrame, min_support: int) -> list[list]:
    rows = []
    for r in frame.head(SHOWN).itertuples(index=False):
        if r.withheld:
            rows.append([r.country, str(r.n), gap_cell(insufficient(int(r.n), min_support), 3)])
        else:
            rows.append([r.country, str(r.n), f"{r.entropy_bits:.2f}", r.top_answer, f"{r.top_share:.2f}"])
    return rows


def _where(r) -> tuple[float, float] | None:
    """Where the run puts a named country (the median of its predicted points), else the
    country's centroid in hdx's taxonomy, else nowhere (a name no code fits)."""
    if np.isfinite(r.lat) and np.isfinite(r.lon):
        return float(r.lat), float(r.lon)
    info = covariates.country_info(r.code) if len(str(r.code)) == 3 else {}
    try:
        return float(info["Latitude"]), float(info["Longitude"])
    except (KeyError, TypeError, ValueError):
        return None


def magnets_map(frame: pd.DataFrame, svg_id: str, width: int = 1000) -> str:
    """Over-prediction on an inline SVG world map: a circle per named country (area: times
    named; red: ratio > 1, blue: < 1, grey: no ratio), its numbers in the tooltip."""
    scale, height = width / 360.0, width // 2
    land = "".join("M" + " L".join(f"{(lo + 180) * scale:.1f},{(90 - la) * scale:.1f}"
                                   for lo, la in p[:: max(1, len(p) // 200)]) + "Z"
                   for p in worldmap.land() if len(p) >= 8)
    top = max(int(frame["predicted"].max()) if len(frame) else 1, 1)
    marks = []
    for r in frame.itertuples(index=False):
        where = _where(r)
        if where is None:
            continue
        ratio = r.ratio if r.ratio is not None and not (isinstance(r.ratio, float) and math.isnan(r.ratio)) else None
        colour = "#999999" if ratio is None else ("#d62728" if ratio > 1 else "#1f77b4")
        radius = 2 + 18 * math.sqrt(r.predicted / top)
        tip = (f"{r.country}: named {r.predicted:,} times, the truth of {r.true:,} clips; "
               + ("over-prediction ratio " + f"{ratio:.2f}" if ratio is not None else
                  "never the truth" if r.true == 0 else "ratio withheld (too few true clips)"))
        x, y = (where[1] + 180) * scale, (90 - where[0]) * scale
        marks.append(f"<g><title>{html.escape(tip)}</title><circle cx='{x:.1f}' cy='{y:.1f}' "
                     f"r='{radius:.1f}' fill='{colour}' fill-opacity='0.6' stroke='#333' "
                     "stroke-width='0.4'/></g>")
    return (f"<svg id='{html.escape(svg_id)}' class='svgmap' viewBox='0 0 {width} {height}' "
            f"width='{width}' height='{height}'><rect width='{width}' height='{height}' fill='#f4f8fb'/>"
            f"<path d='{land}' fill='#e2e2e2' stroke='#aaa' stroke-width='0.3'/>{''.join(marks)}</svg>")


def _flat(by: str, g: dict[str, Any]) -> dict[str, Any]:
    """One group row for the CSV: intervals as _lo / _hi columns."""
    row: dict[str, Any] = {"by": by, "group": g["group"], "pooled": g["pooled"], "n": g["n"],
                           "n_countries": g["n_countries"], "withheld": g.get("withheld", "")}
    for metric in ("country_acc", "continent_acc", "city_acc", "distance_error_km"):
        ci = g.get(f"{metric}_ci95") or [None, None]
        row.update({metric: g.get(metric), f"{metric}_lo": ci[0], f"{metric}_hi": ci[1]})
    return row


def _run_html(run, ctx: SectionContext) -> str:
    o = ctx.options
    name, s = run.name, slug(run.name)
    parts, csv_rows = [f"<h3>{html.escape(name)}</h3>"], []
    for by in BYS:
        t = by_group(run.scored, GroupSpec(by, o.min_support, o.group_bootstrap, o.seed),
                     clusters=run.scored["cluster"].to_numpy() if "cluster" in run.scored else None)
        parts.append(f"<h4>by {by}</h4>{_groups_table(t, f'fairness-{by}-{s}')}"
                     f"{_disparity_table(t, f'disparity-{by}-{s}')}")
        csv_rows += [_flat(by, g) for g in t["groups"]]
    canonical.write_csv(pd.DataFrame(csv_rows), ctx.tables / f"fairness-{s}.csv")
    pull, scatter = magnets(run.scored, o.min_support), spread(run.scored, o.min_support)
    canonical.write_csv(pull, ctx.tables / f"magnets-{s}.csv")
    parts.append("<h4>magnets</h4>" + table(["named country", "named", "true", "excess", "named / true"],
                                             _magnet_rows(pull, o.min_support), f"magnets-{s}"))
    parts.append(table(["true country", "n", "entropy (bits)", "top answer", "top share"],
                       _spread_rows(scatter, o.min_support), f"spread-{s}"))
    parts.append("<p>Over-prediction: a circle per country the run names, where it puts that "
                 "country (the median of its guesses naming it); area: times named; red: named more "
                 "often than it is the truth, blue: less, grey: no ratio (never the truth, or the "
                 f"truth of fewer than {o.min_support} clips).</p>")
    parts.append(Html(magnets_map(pull, f"magnets-map-{s}")))
    parts.append(_model_html(run, ctx, s))
    return "".join(parts)


def _seconds(ctx: SectionContext) -> dict[str, float] | None:
    """Clip lengths from the report's manifest (None without one: the term is left out)."""
    path = ctx.inputs.manifest
    if path is None or not path.exists():
        return None
    import warnings


    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the manifest's own warnings are the evaluate stage's
        m = load_manifest_cached(path, columns=[])
    return dict(zip(m["key"].astype(str), pd.to_numeric(m["mp3seconds"], errors="coerce"), strict=True))


def _model_html(run, ctx: SectionContext, s: str) -> str:
    o = ctx.options
    model = covariate_model(run.scored, _seconds(ctx), bootstrap=o.factor_bootstrap, seed=o.seed,
                            min_events=o.factor_min_events)
    canonical.write_csv(model, ctx.tables / f"covariates-{s}.csv")
    a = model.attrs
    head = ["covariate", "odds ratio [95% CI]", "note"]
    if a["insufficient"]:  # one row says it for every covariate
        rows = [[", ".join(model["term"]), gap_cell(a["insufficient"], 2)]]
    else:
        rows = [[r.term, _ci(r.odds_ratio, [r.lo, r.hi], 2) if r.odds_ratio == r.odds_ratio else "—", r.note]
                for r in model.itertuples(index=False)]
    caption = (f"Country-correct on the recording place's covariates: {a['n']:,} clips"
               + (f" in {a['countries']} countries" if "countries" in a else "")
               + f", {a['left_out']} left out (a covariate unknown for their country); "
               + ("" if a["insufficient"] else f"intervals from {a['bootstrap']} resamples of whole "
                  f"countries ({a['bootstrap_failed']} failed fits counted); ")
               + f"the model needs {o.factor_min_events} correct and wrong answers per covariate.")
    return (f"<h4>covariate regression</h4><p>{html.escape(caption)}</p>"
            + table(head, rows, f"covariates-{s}"))


def section(ctx: SectionContext) -> str | None:
    runs = [r for r in ctx.pipeline_runs if {"true_lat", "true_lon", "true_country"} <= set(r.scored.columns)]
    runs = runs[: max(ctx.options.maps_for, 1)]
    if not runs:
        return None
    intro = INTRO.format(source=html.escape(covariates.source("income")), min_support=ctx.options.min_support)
    intro += (" The regression's language and density come from "
              f"{html.escape(covariates.source('language'))} and {html.escape(covariates.source('density'))}.")
    body = "".join(_run_html(r, ctx) for r in runs)
    return f"<section id='fairness-section'><h2>Who the models fail</h2><p>{intro}</p>{body}</section>"

