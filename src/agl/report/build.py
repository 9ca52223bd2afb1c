"""One self-contained HTML report per pipeline run: leaderboard, plots, breakdowns, error modes.

`make_report(inputs, out_dir, config)` collects the evaluated runs
(`agl.report.inputs.collect_runs`); `build_report` computes the breakdowns, draws the figures,
writes their tables as CSV (the CDF per run for `dvc plots`) and renders `report.html`
(`agl.report.page`, then the sections of `agl.report.sections`) with every image inlined as
base64, so the file opens from disk with no network. The error modes come from the judge
stage's tables (`agl.report.error_modes`); the report calls no model.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from agl.core import canonical, diskwrite
from agl.core.tracking import log_run
from agl.dataset.fingerprints import read_pairs
from agl.dataset.manifest import ManifestWarning, content_hash, dataset_label, load_manifest
from agl.errors import AglError
from agl.judges.modes import JudgeConfig, distribution, prompt_version
from agl.report import analysis, maps, plots, sections
from agl.report.error_modes import run_modes
from agl.report.inputs import ReportConfig, ReportInputs, ReportOptions, RunInput, collect_runs, with_clusters
from agl.report.page import render_page
from agl.report.tables import slug
from agl.scoring.clusters import parse_unit
from agl.scoring.paired import with_holm


def _unit(unit: str, duplicates_csv: Path | None):
    """The resampling unit, with the duplicates table's pairs joined (one recording, one
    cluster) where the table is given and holds any."""
    from dataclasses import replace


    pairs = tuple(read_pairs(duplicates_csv)) if duplicates_csv is not None else ()
    return replace(parse_unit(unit), links=pairs) if pairs else unit


def build_report(runs: list[RunInput], out_dir: Path, *, options: ReportOptions,
                 inputs: ReportInputs | None = None, judge: JudgeConfig | None = None,
                 provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compute, draw and write everything; returns a summary with the written paths.

    `inputs` names the leaderboard, the judges' tables and the sections' tables (none given:
    no leaderboard file, the rule's error modes, no optional section)."""
    if not runs:
        raise AglError("no evaluated runs found (metrics.json + scores_<protocol>.csv); "
                       "run the evaluate stage first (dvc repro evaluate)")
    inputs = inputs or ReportInputs(run_dirs=())
    runs = with_clusters(runs, _unit(options.resampling_unit, inputs.duplicates_csv))
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
        analyses.append((version, group, _analyse(group, Dirs(figs, tables, cdf_dir), options,
                                                  inputs.judges_dir, sfx)))
    board = _read_board(inputs.leaderboard_csv)
    # The birds table describes the pipeline's own clips: its section pairs the runs scored on
    # that data version (the first, largest, when the manifest is not known).
    pipeline_version = str((provenance or {}).get("data version (manifest sha256)", ""))
    pipeline_runs = next((a["order"] for version, _, a in analyses if version == pipeline_version),
                         analyses[0][2]["order"])
    extra = sections.render(sections.SectionContext(runs=runs, pipeline_runs=pipeline_runs, inputs=inputs,
                                                    options=options, figs=figs, tables=tables))
    page = render_page(analyses, board, options, judge, provenance or {}, inputs.leaderboard_csv, extra)
    html_path = out_dir / "report.html"
    diskwrite.write_text(html_path, page)
    summary = _summary(analyses, options, judge, html_path)
    canonical.write_json(out_dir / "summary.json", summary)
    return summary


def _summary(analyses: list, options: ReportOptions, judge: JudgeConfig | None, html_path: Path) -> dict[str, Any]:
    written = {k: v for _, _, a in analyses for k, v in a["written"].items()}
    mode_table = pd.concat([a["mode_table"] for _, _, a in analyses])
    return {
        "runs": [r.name for _, _, a in analyses for r in a["order"]],
        "data_versions": {version: [r.name for r in a["order"]] for version, _, a in analyses},
        "protocol": options.protocol,
        "html": str(html_path),
        "plots": {k: str(v) for k, v in written.items()},  # a path, or a NoData note
        "error_modes": mode_table.to_dict(orient="index"),
        "judge": None if judge is None else {"backend": judge.backend, "model": judge.model,
                                             "prompt_version": prompt_version()},
    }


def _by_data_version(runs: list[RunInput]) -> list[tuple[str, list[RunInput]]]:
    """Runs grouped by the manifest hash they were scored on, the largest dataset first."""
    groups: dict[str, list[RunInput]] = {}
    for r in runs:
        groups.setdefault(str(r.info.get("data_version") or ""), []).append(r)

    def size(item: tuple[str, list[RunInput]]) -> tuple[float, str]:
        clips = [c for c in (r.info.get("dataset_clips") for r in item[1]) if c is not None]
        return (-float(max(clips)) if clips else 0.0, item[0])

    return sorted(groups.items(), key=size)


class Dirs(NamedTuple):
    """Where a report's figures, tables and per-run CDF tables go."""

    figs: Path
    tables: Path
    cdf: Path


def _analyse(runs: list[RunInput], dirs: Dirs, options: ReportOptions, judges_dir: Path | None,
             sfx: str) -> dict[str, Any]:
    """Breakdowns, figures, error modes, factors and paired tests of the runs on one dataset."""
    figs, tables = dirs.figs, dirs.tables
    order = sorted(runs, key=lambda r: (r.scored["distance_km"].mean(), r.name))
    breakdowns = _breakdowns(order, dirs, options)
    written = {
        f"cdf{sfx}": plots.cdf_plot({r.name: r.scored for r in order}, figs / f"cdf{sfx}.png"),
        f"accuracy_by_continent{sfx}": plots.accuracy_by_continent(
            {n: b["continent"] for n, b in breakdowns.items()}, figs / f"accuracy_by_continent{sfx}.png",
            min_support=options.min_support),
    }
    for r in order[: options.maps_for]:
        written[f"map_{r.name}"] = maps.world_map(r.scored, figs / f"map_{slug(r.name)}.png",
                                                   title=r.name)
        written[f"confusion_{r.name}"] = plots.confusion_heatmap(
            breakdowns[r.name]["confusion"], figs / f"confusion_{slug(r.name)}.png", title=r.name)

    modes = {r.name: run_modes(r, judges_dir, wrong_km=options.wrong_km) for r in order}
    for name, frame in modes.items():
        canonical.write_csv(frame, tables / f"error_modes_{slug(name)}.csv")
    mode_table = distribution(modes)
    canonical.write_csv(mode_table, tables / f"error_modes{sfx}.csv", index=True)
    written[f"error_modes{sfx}"] = plots.error_mode_bars(mode_table, figs / f"error_modes{sfx}.png")

    factors = {r.name: analysis.country_factors(
        r.scored, bootstrap=options.factor_bootstrap, seed=options.seed,
        min_present=options.min_support, min_events_per_factor=options.factor_min_events)
        for r in order}
    for name, f in factors.items():
        canonical.write_csv(f, tables / f"factors_{slug(name)}.csv")
    paired_frame = _paired(order, options)
    canonical.write_csv(paired_frame, tables / f"paired{sfx}.csv")
    return {"order": order, "breakdowns": breakdowns, "modes": modes, "mode_table": mode_table,
            "factors": factors, "paired": paired_frame, "written": written,
            "by_name": {r.name: r for r in order}, "sfx": sfx}


def _breakdowns(order: list[RunInput], dirs: Dirs, options: ReportOptions) -> dict[str, dict[str, pd.DataFrame]]:
    """Each run's breakdowns, written with its confusion table and CDF points."""
    breakdowns = {}
    for r in order:
        breakdowns[r.name] = analysis.run_breakdowns(
            r.scored, min_clips=options.min_country_clips, confidence_bins=options.confidence_bins,
            bootstrap=options.group_bootstrap, seed=options.seed)
        parts = [t for k, t in breakdowns[r.name].items() if k != "confusion"]
        canonical.write_csv(pd.concat(parts, ignore_index=True),
                            dirs.tables / f"breakdowns_{slug(r.name)}.csv")
        canonical.write_csv(breakdowns[r.name]["confusion"],
                            dirs.tables / f"confusion_{slug(r.name)}.csv", index=True)
        canonical.write_csv(plots.cdf_points(r.scored), dirs.cdf / f"{slug(r.name)}.csv")
    return breakdowns


def _paired(order: list[RunInput], options: ReportOptions) -> pd.DataFrame:
    """The best run (first) against each other run on their common clips."""
    best = order[0]
    paired = []
    for r in order[1:]:
        cmp = analysis.compare_runs(best.scored, r.scored, n_boot=options.paired_bootstrap,
                                    n_perm=options.paired_permutations, seed=options.seed,
                                    min_support=options.min_support)
        paired.append(cmp.assign(a=best.name, b=r.name))
    if not paired:
        return pd.DataFrame()
    return with_holm(pd.concat(paired, ignore_index=True),
                     f"this table: {best.name} against each other run, every metric")


def _read_board(path: Path | None) -> pd.DataFrame | None:
    if path is None or not Path(path).exists():
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()



def make_report(inputs: ReportInputs, out_dir: Path, config: ReportConfig) -> dict[str, Any]:
    """Collect the runs, build the report, and (with `config.track`) log it to MLflow: the
    report stage's and `agl report`'s one call."""
    options = config.options
    runs = collect_runs(list(inputs.run_dirs), options.protocol)
    provenance = _provenance(inputs, config)
    summary = build_report(runs, out_dir, options=options, inputs=inputs, judge=config.judge,
                           provenance=provenance)
    summary["provenance"] = provenance
    if config.track:
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
            experiment=config.experiment)
    return summary


def _provenance(inputs: ReportInputs, config: ReportConfig) -> dict[str, Any]:
    """The report's provenance block: the data, its version, the run folders, the params."""
    manifest = inputs.manifest
    known = bool(manifest and Path(manifest).exists())
    dataset = "unknown (no manifest given)"
    if known:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ManifestWarning)
            dataset = dataset_label(load_manifest(manifest))
    judge = config.judge
    return {
        "dataset": dataset,
        "data version (manifest sha256)": content_hash(manifest) if known else "unknown (no manifest given)",
        "manifest": str(manifest),
        "run folders": [str(d) for d in inputs.run_dirs],
        "params report": dict(config.params),
        "judge": "none" if judge is None else f"{judge.backend}/{judge.model}",
        **inputs.extra_provenance,
    }
