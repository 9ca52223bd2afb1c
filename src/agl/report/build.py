"""One self-contained HTML report per pipeline run: leaderboard, plots, breakdowns, error modes.

`make_report` collects the evaluated runs (`agl.report.inputs.collect_runs`); `build_report`
computes the breakdowns, draws the figures, writes their tables as CSV (the CDF per run for
`dvc plots`) and renders `report.html` (`agl.report.page`) with every image inlined as
base64, so the file opens from disk with no network.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical
from agl.core.tracking import log_run
from agl.dataset.manifest import ManifestWarning, content_hash, dataset_label, load_manifest
from agl.errors import AglError
from agl.report import analysis, error_modes, maps, plots
from agl.report.birds import birds_section
from agl.report.error_modes import JudgeConfig
from agl.report.inputs import ReportOptions, RunInput, collect_runs, judge_from_config, options_from_config
from agl.report.page import render_page
from agl.report.tables import img, slug


def build_report(runs: list[RunInput], out_dir: Path, *, options: ReportOptions,
                 leaderboard_csv: Path | None = None, judge: JudgeConfig | None = None,
                 provenance: dict[str, Any] | None = None,
                 birds_csv: Path | None = None, sections: tuple = ()) -> dict[str, Any]:
    """Compute, draw and write everything; returns a summary with the written paths.

    `sections`: extra sections (callables `(plots_dir, tables_dir, img) -> html`), rendered
    before the provenance in the given order (e.g. agl.counterfactual.report_section)."""
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
    extra = [birds_section(birds_runs, birds_csv, figs, tables, options=options, img=img)]
    extra += [make(figs, tables, img) for make in sections]
    page = render_page(analyses, board, options, judge, provenance or {}, leaderboard_csv, extra)
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
             judge: JudgeConfig | None, sfx: str) -> dict[str, Any]:
    """Breakdowns, figures, error modes, factors and paired tests of the runs on one dataset."""
    boot = {"bootstrap": options.group_bootstrap, "seed": options.seed}
    order = sorted(runs, key=lambda r: (r.scored["distance_km"].mean(), r.name))
    by_name = {r.name: r for r in order}

    breakdowns = {}
    for r in order:
        breakdowns[r.name] = analysis.run_breakdowns(
            r.scored, min_clips=options.min_country_clips, confidence_bins=options.confidence_bins,
            **boot)
        parts = [t for k, t in breakdowns[r.name].items() if k != "confusion"]
        canonical.write_csv(pd.concat(parts, ignore_index=True),
                            tables / f"breakdowns_{slug(r.name)}.csv")
        canonical.write_csv(breakdowns[r.name]["confusion"],
                            tables / f"confusion_{slug(r.name)}.csv", index=True)
        canonical.write_csv(plots.cdf_points(r.scored), cdf_dir / f"{slug(r.name)}.csv")

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

    modes = {r.name: error_modes.classify(r.scored, r.predictions, run=r.name, judge=judge,
                                          wrong_km=options.wrong_km) for r in order}
    for name, frame in modes.items():
        canonical.write_csv(frame, tables / f"error_modes_{slug(name)}.csv")
    mode_table = error_modes.distribution(modes)
    canonical.write_csv(mode_table, tables / f"error_modes{sfx}.csv", index=True)
    written[f"error_modes{sfx}"] = plots.error_mode_bars(mode_table, figs / f"error_modes{sfx}.png")

    factors = {r.name: analysis.country_factors(
        r.scored, bootstrap=options.factor_bootstrap, seed=options.seed,
        min_present=options.min_support, min_events_per_factor=options.factor_min_events)
        for r in order}
    for name, f in factors.items():
        canonical.write_csv(f, tables / f"factors_{slug(name)}.csv")

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



def make_report(*, run_dirs: list[Path], out_dir: Path, cfg: dict[str, Any],
                leaderboard_csv: Path | None, manifest: Path | None,
                extra_provenance: dict[str, Any] | None = None,
                track: bool = True, experiment: str | None = None,
                birds_csv: Path | None = None, sections: tuple = ()) -> dict[str, Any]:
    """Collect the runs, build the report, and (with `track`) log it to MLflow."""
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
