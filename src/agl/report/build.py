"""One self-contained HTML report per pipeline run: leaderboard, plots, breakdowns, error modes.

`collect_runs` finds every evaluated run (`<dir>/<run>/metrics.json` with its per-clip
`scores_<protocol>.csv` beside, written by the evaluate and paper stages); `build_report`
computes the breakdowns, draws the figures, writes their tables as CSV (the CDF per run for
`dvc plots`) and renders `report.html` with every image inlined as base64, so the file opens
from disk with no network.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical
from agl.errors import AglError


@dataclass
class RunInput:
    name: str
    scored: pd.DataFrame
    predictions: dict[str, Any] | None = None  # for the judge: reasoning per clip
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportOptions:
    protocol: str = "paper"
    bootstrap: int = 1000
    seed: int = 0
    min_country_clips: int = 10
    confidence_bins: int = 5
    factor_bootstrap: int = 200
    paired_bootstrap: int = 2000
    paired_permutations: int = 10000
    wrong_km: float = 750.0
    maps_for: int = 6  # maps and confusion heat maps for the best N runs (by mean km)
    min_support: int = 10  # clips behind an estimate (group mean, accuracy, factor presence)
    factor_min_events: int = 10  # correct and wrong answers per factor of the regression


def collect_runs(roots: list[Path], protocol: str) -> list[RunInput]:
    """Every `<root>/<run>/metrics.json` that has `scores_<protocol>.csv` beside it."""
    from agl.predictions.records import read_predictions

    runs = []
    for root in roots:
        for metrics in sorted(Path(root).glob("*/metrics.json")):
            scores = metrics.parent / f"scores_{protocol}.csv"
            if not scores.exists():
                continue
            doc = json.loads(metrics.read_text())
            name = str(doc.get("run") or metrics.parent.name)
            frame = pd.read_csv(scores, keep_default_na=True)
            for col in ("has_speech", "refused", "failed"):
                frame[col] = frame[col].astype(str).str.lower().eq("true")
            preds_path = metrics.parent / "predictions.jsonl"
            preds = read_predictions(preds_path) if preds_path.exists() else None
            runs.append(RunInput(name, frame, preds, {
                "metrics": str(metrics), "data_version": str(doc.get("data_version") or ""),
                "dataset": str(doc.get("dataset") or ""), "dataset_clips": doc.get("dataset_clips")}))
    return runs


# --- html helpers -----------------------------------------------------------------------------


def _num(v: Any, digits: int) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:,.{digits}f}" if isinstance(v, float) else str(v)


def _ci(row: pd.Series, col: str, digits: int) -> str:
    v = _num(row.get(col), digits)
    lo, hi = _num(row.get(f"{col}_lo"), digits), _num(row.get(f"{col}_hi"), digits)
    return f"{v} [{lo}, {hi}]" if v and lo else v


def _table(head: list[str], rows: list[list[str]], table_id: str = "") -> str:
    ident = f" id='{html.escape(table_id)}'" if table_id else ""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table{ident}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _frame_table(frame: pd.DataFrame, table_id: str = "", digits: int = 3) -> str:
    frame = frame.reset_index() if frame.index.name else frame
    rows = [[_num(v, digits) if isinstance(v, float) else str(v) for v in r]
            for r in frame.itertuples(index=False)]
    return _table([str(c) for c in frame.columns], rows, table_id)


def _supported(row: pd.Series, col: str, n_col: str, digits: int, min_n: int,
               ci: bool = True) -> str:
    """An estimate with its n beside it, or "insufficient data (n = k, needs m)"."""
    from agl.report.analysis import insufficient

    n = int(row[n_col])
    if n < min_n:
        return insufficient(n, min_n)
    value = _ci(row, col, digits) if ci else _num(row.get(col), digits)
    return f"{value} (n = {n})"


def _breakdown_table(table: pd.DataFrame, table_id: str = "", min_n: int = 1) -> str:
    head = ["group", "n", "mean km [95% CI]", "median km", "continent acc", "country acc",
            "city acc", "reject rate", "failure rate"]
    rows = [[str(r["group"]), str(r["n"]), _supported(r, "mean_km", "n_km", 1, min_n),
             _supported(r, "median_km", "n_km", 1, min_n, ci=False),
             *(_supported(r, f"{lv}_acc", f"{lv}_n", 3, min_n)
               for lv in ("continent", "country", "city")),
             _supported(r, "reject_rate", "n", 3, min_n),
             _supported(r, "failure_rate", "n", 3, min_n)] for _, r in table.iterrows()]
    return _table(head, rows, table_id)


def _img(path: Path, alt: str, img_id: str) -> str:
    from agl.report.plots import NoData

    if isinstance(path, NoData):  # a chart with nothing to draw: its one-line note instead
        return f"<p class='no-chart' id='{html.escape(img_id)}'>{html.escape(path)}</p>"
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (f"<figure><img id='{html.escape(img_id)}' alt='{html.escape(alt)}' "
            f"src='data:image/png;base64,{data}'><figcaption>{html.escape(alt)}</figcaption>"
            "</figure>")


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


# --- the report -------------------------------------------------------------------------------


def build_report(runs: list[RunInput], out_dir: Path, *, options: ReportOptions,
                 leaderboard_csv: Path | None = None, judge=None,
                 provenance: dict[str, Any] | None = None,
                 birds_csv: Path | None = None, sections: tuple = ()) -> dict[str, Any]:
    """Compute, draw and write everything; returns a summary with the written paths.

    `sections`: extra sections (callables `(plots_dir, tables_dir, img) -> html`), rendered
    before the provenance in the given order (e.g. agl.counterfactual.report_section)."""
    from agl.report import error_modes
    from agl.report.birds import birds_section  # its own module (agl.report.birds)

    if not runs:
        raise AglError("no evaluated runs found (metrics.json + scores_<protocol>.csv); "
                       "run the evaluate stage first (dvc repro evaluate)")
    out_dir = Path(out_dir)
    figs, tables = out_dir / "plots", out_dir / "tables"
    cdf_dir = out_dir / "cdf"
    for d in (figs, tables, cdf_dir):
        d.mkdir(parents=True, exist_ok=True)
    # One analysis per data version: figures, breakdowns and paired tests never mix datasets.
    datasets = _by_data_version(runs)
    analyses = []
    for version, group in datasets:
        sfx = f"_{version[:12]}" if len(datasets) > 1 else ""
        analyses.append((version, group, _analyse(group, figs, tables, cdf_dir, options, judge, sfx)))
    board = _read_board(leaderboard_csv)
    # The birds table describes the pipeline's own clips: its section pairs the runs scored on
    # that data version (the first, largest, when the manifest is not known).
    pipeline_version = str((provenance or {}).get("data version (manifest sha256)", ""))
    birds_runs = next((a["order"] for version, _, a in analyses if version == pipeline_version),
                      analyses[0][2]["order"])
    extra = [birds_section(birds_runs, birds_csv, figs, tables, options=options, img=_img)]
    extra += [make(figs, tables, _img) for make in sections]
    page = _render(analyses, board, options, judge, provenance or {}, leaderboard_csv, extra)
    html_path = out_dir / "report.html"
    html_path.write_text(page, encoding="utf-8")
    written = {k: v for _, _, a in analyses for k, v in a["written"].items()}
    mode_table = pd.concat([a["mode_table"] for _, _, a in analyses])
    summary = {
        "runs": [r.name for _, _, a in analyses for r in a["order"]],
        "data_versions": {version: [r.name for r in a["order"]] for version, _, a in analyses},
        "protocol": options.protocol,
        "html": str(html_path),
        "plots": {k: str(v) for k, v in written.items()},  # a path, or a NoData note
        "error_modes": mode_table.to_dict(orient="index"),
        "judge": None if judge is None else {"backend": judge.backend, "model": judge.model,
                                             "prompt_version": error_modes.prompt_version()},
    }
    canonical.write_json(out_dir / "summary.json", summary)
    return summary


def _by_data_version(runs: list[RunInput]) -> list[tuple[str, list[RunInput]]]:
    """Runs grouped by the manifest hash they were scored on, the largest dataset first."""
    groups: dict[str, list[RunInput]] = {}
    for r in runs:
        groups.setdefault(str(r.info.get("data_version") or ""), []).append(r)

    def size(item: tuple[str, list[RunInput]]) -> tuple[float, str]:
        clips = [c for c in (r.info.get("dataset_clips") for r in item[1]) if c is not None]
        return (-float(max(clips)) if clips else 0.0, item[0])

    return sorted(groups.items(), key=size)


def _analyse(runs: list[RunInput], figs: Path, tables: Path, cdf_dir: Path, options: ReportOptions,
             judge, sfx: str) -> dict[str, Any]:
    """Breakdowns, figures, error modes, factors and paired tests of the runs on one dataset."""
    from agl.report import analysis, error_modes, plots

    boot = {"bootstrap": options.bootstrap, "seed": options.seed}
    order = sorted(runs, key=lambda r: (r.scored["distance_km"].mean(), r.name))
    by_name = {r.name: r for r in order}

    breakdowns = {}
    for r in order:
        breakdowns[r.name] = analysis.run_breakdowns(
            r.scored, min_clips=options.min_country_clips, confidence_bins=options.confidence_bins,
            **boot)
        parts = [t for k, t in breakdowns[r.name].items() if k != "confusion"]
        canonical.write_csv(pd.concat(parts, ignore_index=True),
                            tables / f"breakdowns_{_slug(r.name)}.csv")
        canonical.write_csv(breakdowns[r.name]["confusion"],
                            tables / f"confusion_{_slug(r.name)}.csv", index=True)
        canonical.write_csv(plots.cdf_points(r.scored), cdf_dir / f"{_slug(r.name)}.csv")

    written = {
        f"cdf{sfx}": plots.cdf_plot({r.name: r.scored for r in order}, figs / f"cdf{sfx}.png"),
        f"accuracy_by_continent{sfx}": plots.accuracy_by_continent(
            {n: b["continent"] for n, b in breakdowns.items()}, figs / f"accuracy_by_continent{sfx}.png",
            min_support=options.min_support),
    }
    for r in order[: options.maps_for]:
        written[f"map_{r.name}"] = plots.world_map(r.scored, figs / f"map_{_slug(r.name)}.png",
                                                   title=r.name)
        written[f"confusion_{r.name}"] = plots.confusion_heatmap(
            breakdowns[r.name]["confusion"], figs / f"confusion_{_slug(r.name)}.png", title=r.name)

    modes = {r.name: error_modes.classify(r.scored, r.predictions, run=r.name, judge=judge,
                                          wrong_km=options.wrong_km) for r in order}
    for name, frame in modes.items():
        canonical.write_csv(frame, tables / f"error_modes_{_slug(name)}.csv")
    mode_table = error_modes.distribution(modes)
    canonical.write_csv(mode_table, tables / f"error_modes{sfx}.csv", index=True)
    written[f"error_modes{sfx}"] = plots.error_mode_bars(mode_table, figs / f"error_modes{sfx}.png")

    factors = {r.name: analysis.country_factors(
        r.scored, bootstrap=options.factor_bootstrap, seed=options.seed,
        min_present=options.min_support, min_events_per_factor=options.factor_min_events)
        for r in order}
    for name, f in factors.items():
        canonical.write_csv(f, tables / f"factors_{_slug(name)}.csv")

    best = order[0]
    paired = []
    for r in order[1:]:
        cmp = analysis.compare_runs(best.scored, r.scored, n_boot=options.paired_bootstrap,
                                    n_perm=options.paired_permutations, seed=options.seed,
                                    min_support=options.min_support)
        paired.append(cmp.assign(a=best.name, b=r.name))
    paired_frame = pd.concat(paired, ignore_index=True) if paired else pd.DataFrame()
    canonical.write_csv(paired_frame, tables / f"paired{sfx}.csv")
    return {"order": order, "breakdowns": breakdowns, "modes": modes, "mode_table": mode_table,
            "factors": factors, "paired": paired_frame, "written": written, "by_name": by_name,
            "sfx": sfx}


def _read_board(path: Path | None) -> pd.DataFrame | None:
    if path is None or not Path(path).exists():
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _render(sections, board, options, judge, provenance, leaderboard_csv, extra_sections=()) -> str:
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
        from agl.scoring.leaderboard import SUBSET_NOTE, groups, render_rows

        parts.append("<p>Mean distance and accuracies with 95% bootstrap intervals; 'paper' "
                     "columns are the values the AGL1K paper reports for the same model.</p>")
        for k, (header, rows_of) in enumerate(groups(board)):
            head, rows = render_rows(rows_of)
            if header:
                parts.append(f"<h3>{html.escape(header)}</h3>")
            parts.append(_table(head, rows, "leaderboard" if k == 0 else f"leaderboard-{k + 1}")
                         .replace("<table ", "<table class='leaderboard' ", 1))
            if "subset" in rows_of and rows_of["subset"].astype(str).str.lower().eq("true").any():
                parts.append(f"<p class='note'>{html.escape(SUBSET_NOTE)}</p>")
    else:
        where = html.escape(str(leaderboard_csv)) if leaderboard_csv else "no file given"
        parts.append(f"<p>No leaderboard ({where}); headline numbers per run:</p>")
        rows = [[r.name, *(_ci(a["breakdowns"][r.name]["all"].iloc[0], c, d) for c, d in
                           (("mean_km", 1), ("country_acc", 3), ("continent_acc", 3)))]
                for _, _, a in sections for r in a["order"]]
        parts.append(_table(["run", "mean km", "country acc", "continent acc"], rows,
                            "leaderboard"))
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
    parts.append(_table(["what", "value"], rows, "provenance-table"))
    parts.append("</section></body></html>")
    return "\n".join(parts)


def _render_data(a: dict[str, Any], options: ReportOptions, judge) -> str:
    """The sections of one dataset's runs (ids carry the data version when there are several)."""
    from agl.report import error_modes, plots

    order, breakdowns, mode_table, factors = a["order"], a["breakdowns"], a["mode_table"], a["factors"]
    paired, written, sfx = a["paired"], a["written"], a["sfx"]
    tag = sfx.replace("_", "-")
    parts = []
    parts.append(f"<section id='cdf-section{tag}'><h2>Distance error</h2>")
    parts.append(_img(written[f"cdf{sfx}"], "Cumulative distribution of distance error "
                      "(marks at 1, 25, 200, 750, 2500 km)", f"cdf{tag}"))
    parts.append(_img(written[f"accuracy_by_continent{sfx}"], "Accuracy by true continent",
                      f"accuracy-by-continent{tag}"))
    parts.append("</section>")

    parts.append(f"<section id='map-section{tag}'><h2>Maps</h2>")
    for r in order[: options.maps_for]:
        parts.append(_img(written[f"map_{r.name}"], f"{r.name}: true locations coloured by "
                          "error, and predicted points", f"map-{_slug(r.name)}"))
    parts.append("<h3>Interactive</h3><p>Hover a point: the clip, its true and predicted place "
                 "and the error; the line joins it to the prediction.</p>")
    for r in order[: options.maps_for]:
        parts.append(f"<h4>{html.escape(r.name)}</h4>")
        parts.append(plots.svg_map(r.scored, svg_id=f"svgmap-{_slug(r.name)}"))
    parts.append("</section>")

    parts.append(f"<section id='error-modes-section{tag}'><h2>Error modes</h2>")
    judged = ("judge: " + html.escape(f"{judge.backend}/{judge.model}") + ", rubric "
              + error_modes.prompt_version()) if judge else (
        "no judge configured: only Refusal and Failure are decided (from the record); the "
        "other six modes need a judge and those predictions are counted as 'Unjudged'")
    judged = judged[0].upper() + judged[1:]
    parts.append(f"<p>Wrong = refused, failed, or wrong country (distance &gt; "
                 f"{options.wrong_km:g} km where the country is not scored). {judged}.</p>")
    parts.append(_frame_table(mode_table, f"error-modes{tag}", 0))
    parts.append(_img(written[f"error_modes{sfx}"], "Error modes per run (share of wrong predictions)",
                      f"error-modes-bars{tag}"))
    parts.append("</section>")

    if not paired.empty:
        parts.append(f"<section id='paired-section{tag}'><h2>Paired comparisons</h2><p>Best run "
                     "(lowest mean km) against each other run on their common clips: "
                     "difference A - B with a paired bootstrap 95% CI and a sign-flip "
                     f"permutation p-value; fewer than {options.min_support} common clips: "
                     "no estimate (note).</p>")
        cols = ["a", "b", "metric", "n", "mean_a", "mean_b", "diff", "ci_lo", "ci_hi", "p_value",
                "note"]
        parts.append(_frame_table(paired[cols], f"paired{tag}", 4))
        parts.append("</section>")

    parts.append(f"<section id='breakdowns-section{tag}'><h2>Breakdowns per run</h2>")
    for r in order:
        b = breakdowns[r.name]
        slug = _slug(r.name)
        parts.append(f"<h3>{html.escape(r.name)}</h3>")
        for key, title in (("all", "All clips"), ("speech", "Speech vs non-speech"),
                           ("category", "Sound category, non-speech clips (overlapping)"),
                           ("continent", "True continent"),
                           ("country", f"True country (>= {options.min_country_clips} clips)"),
                           ("status", "Prediction status"), ("calibration",
                                                             "Self-reported confidence")):
            if key in b:
                parts.append(f"<h4>{html.escape(title)}</h4>")
                parts.append(_breakdown_table(b[key], f"{key}-{slug}", options.min_support))
        parts.append("<h4>Continent confusion (counts)</h4>")
        parts.append(_frame_table(b["confusion"], f"confusion-{slug}", 0))
        if f"confusion_{r.name}" in written:
            parts.append(_img(written[f"confusion_{r.name}"], f"{r.name}: continent confusion",
                              f"confusion-img-{slug}"))
        f = factors[r.name]
        if not f.empty:
            fa = f.attrs
            parts.append("<h4>What predicts a correct country (logistic regression, "
                         f"n = {fa.get('n')} scored clips, {fa.get('correct')} correct)</h4>")
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
            parts.append(_frame_table(f, f"factors-{slug}", 3))
    parts.append("</section>")
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
img{max-width:100%;height:auto} figure{margin:1em 0}
figcaption{font-size:13px;color:#555}
.no-chart,.insufficient{color:#7a4a00;font-style:italic}
.svgmap{max-width:100%;height:auto;border:1px solid #ccc}
.svgmap line{stroke:#d62728;stroke-width:1;visibility:hidden}
.svgmap g:hover line{visibility:visible} .svgmap g:hover circle{r:5;stroke:#000}
h2.data-version{border-top:4px solid #444;padding-top:0.5em;margin-top:2.5em;font-size:1.7em}
"""


# --- entry point shared by `agl report` and stages/report.py ------------------------------------


def judge_from_config(cfg: dict[str, Any] | None):
    """A JudgeConfig from the params' `report.judge` mapping (None: no judge)."""
    from agl.report.error_modes import JudgeConfig

    if not cfg:
        return None
    missing = [k for k in ("backend", "model") if not cfg.get(k)]
    if missing:
        raise AglError(f"params report.judge: set {', '.join(missing)} (or judge: null)")
    cache = cfg.get("cache_dir")
    return JudgeConfig(backend=str(cfg["backend"]), model=str(cfg["model"]),
                       settings=dict(cfg.get("settings") or {}),
                       cache_dir=Path(cache) if cache else None,
                       concurrency=int(cfg.get("concurrency", 4)),
                       timeout_s=float(cfg.get("timeout_s", 120)),
                       max_retries=int(cfg.get("max_retries", 5)))


def options_from_config(cfg: dict[str, Any]) -> ReportOptions:
    known = ReportOptions.__dataclass_fields__
    unknown = sorted(set(cfg) - set(known) - {"judge", "track"})
    if unknown:
        raise AglError(f"params report: unknown key(s) {', '.join(unknown)}; "
                       f"known: {', '.join(sorted(known))}, judge, track")
    values = {}
    for k, v in cfg.items():
        if k in known:
            kind = type(getattr(ReportOptions, k))
            try:
                values[k] = kind(v)
            except (TypeError, ValueError):
                raise AglError(f"params report.{k}: {v!r} is not a {kind.__name__}") from None
    return ReportOptions(**values)


def make_report(*, run_dirs: list[Path], out_dir: Path, cfg: dict[str, Any],
                leaderboard_csv: Path | None, manifest: Path | None,
                extra_provenance: dict[str, Any] | None = None,
                track: bool = True, experiment: str | None = None,
                birds_csv: Path | None = None, sections: tuple = ()) -> dict[str, Any]:
    """Collect the runs, build the report, and (with `track`) log it to MLflow."""
    import warnings

    from agl.dataset.manifest import ManifestWarning, content_hash, dataset_label, load_manifest

    options = options_from_config(cfg)
    judge = judge_from_config(cfg.get("judge"))
    runs = collect_runs(run_dirs, options.protocol)
    dataset = "unknown (no manifest given)"
    if manifest and Path(manifest).exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ManifestWarning)
            dataset = dataset_label(load_manifest(manifest))
    provenance: dict[str, Any] = {
        "dataset": dataset,
        "data version (manifest sha256)": content_hash(manifest) if manifest and
        Path(manifest).exists() else "unknown (no manifest given)",
        "manifest": str(manifest),
        "run folders": [str(d) for d in run_dirs],
        "params report": {k: v for k, v in cfg.items() if k != "judge"},
        "judge": "none" if judge is None else f"{judge.backend}/{judge.model}",
        **(extra_provenance or {}),
    }
    summary = build_report(runs, out_dir, options=options, leaderboard_csv=leaderboard_csv,
                           judge=judge, provenance=provenance, birds_csv=birds_csv,
                           sections=sections)
    summary["provenance"] = provenance
    if track:
        from agl.core.tracking import log_run

        metrics = {f"error_modes.{run}.{mode}": n for run, modes in
                   summary["error_modes"].items() for mode, n in modes.items()}
        # One MLflow run per (protocol, data version), like the model runs.
        version = str(provenance["data version (manifest sha256)"])[:12]
        summary["mlflow_run_id"] = log_run(
            run_key=f"report/{options.protocol}/{version}",
            run_name=f"report ({options.protocol})",
            params={"report": provenance["params report"], "judge": provenance["judge"],
                    "runs": summary["runs"]},
            metrics=metrics,
            artifacts=[Path(summary["html"]), Path(out_dir) / "plots",
                       Path(out_dir) / "tables"],
            tags={"data_version": str(provenance["data version (manifest sha256)"])},
            experiment=experiment)
    return summary
