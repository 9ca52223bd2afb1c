"""The report's "Birds" section: do models use the birds they hear, and what would an expert
ear alone guess?

* each run's error on clips where BirdNET hears birds vs not (bootstrap CIs);
* the `birdrange` run beside each other run on the birds-heard clips (paired bootstrap CI and
  sign-flip permutation p-value, `agl.report.analysis.compare_runs`);
* for one clip, a map of birdrange's occurrence surface (the inverted range model) with the
  truth and every run's guess.

Inputs: the birds stage's table (`birds.csv`: `birds_heard` per clip) and the runs the report
already collected; a birdrange run is recognised by its run_summary.json's backend.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.birds import range_model as birdrange
from agl.core import canonical
from agl.report import maps, plots
from agl.report.analysis import compare_runs, group_row
from agl.report.sections import SectionContext
from agl.report.tables import breakdown_legend, breakdown_table, img, paired_table, slug
from agl.scoring.paired import with_holm

GROUPS = ("birds heard", "no birds heard", "not listened")


def _birds_heard(birds: pd.DataFrame) -> dict[str, str]:
    out = {}
    for key, status, heard in zip(birds["key"], birds["status"], birds["birds_heard"], strict=True):
        if status != "ok":
            out[str(key)] = "not listened"
        else:
            out[str(key)] = "birds heard" if str(heard).lower() == "true" else "no birds heard"
    return out


def by_birds(scored: pd.DataFrame, heard: dict[str, str], **boot) -> pd.DataFrame:
    """A partition of a run's clips by what BirdNET heard (clips it never saw: not listened)."""
    group = scored["sample_id"].astype(str).map(heard).fillna("not listened")
    rows = [
        {"breakdown": "birds", "group": g, **group_row(scored[group == g], **boot)}
        for g in GROUPS
        if (group == g).any()
    ]
    return pd.DataFrame(rows)


def _run_dir(run) -> Path | None:
    metrics = run.info.get("metrics")
    return Path(metrics).parent if metrics else None


def _summary(run) -> dict[str, Any]:
    d = _run_dir(run)
    path = d / "run_summary.json" if d else None
    return json.loads(path.read_text()) if path and path.exists() else {}


def find_birdrange(runs) -> Any | None:
    """The first run whose run_summary.json names the birdrange backend, or None."""
    for r in runs:
        if _summary(r).get("backend") == "birdrange":
            return r
    return None


def _pick_clip(run) -> tuple[str, dict[str, Any]] | None:
    """The birdrange answer with the most species heard (ties: the smallest key)."""
    if not run.predictions:
        return None
    best = None
    for key in sorted(run.predictions):
        p = run.predictions[key]
        species = p.meta.get("species_weights") or []
        if p.latitude is None or not species:
            continue
        if best is None or len(species) > len(best[1]["species_weights"]):
            best = (key, p.meta)
    return best


def surface_map(run, runs, path: Path) -> tuple[Path, str] | None:
    """Draw birdrange's occurrence surface for one clip with truth and every run's guess."""
    picked = _pick_clip(run)
    if picked is None:
        return None
    key, meta = picked
    settings = _summary(run).get("settings") or {}
    grid, _ = birdrange.load_or_build(
        Path(settings.get("cache_dir", "cache/birdrange")),
        resolution_deg=float(settings.get("resolution_deg", 1.0)),
        week=int(meta.get("week", birdrange.YEAR_ROUND)),
        floor=float(settings.get("floor", 0.01)),
        threads=int(settings.get("threads", 2)),
    )
    species = [(str(s), float(w)) for s, w in meta["species_weights"]]
    score = birdrange.surface(
        grid, species, scoring=str(settings.get("scoring", "vote")), floor=float(settings.get("floor", 0.01))
    )
    plt = plots._plt()
    fig, ax = plt.subplots(figsize=(11, 6))
    maps.basemap(ax)
    # One square per grid cell, as wide as the cell (a fixed size left a coarse grid dotted).
    resolution = float(settings.get("resolution_deg", 1.0))
    points_per_deg = ax.get_window_extent().width * 72.0 / fig.dpi / 360.0
    side = resolution * points_per_deg * 0.8  # of the map as drawn; tight layout shrinks it a bit
    pts = ax.scatter(grid.lon, grid.lat, c=score, s=side**2, marker="s", cmap="YlGn", edgecolors="none", zorder=1)
    fig.colorbar(pts, ax=ax, shrink=0.6, label="birdrange score (higher: heard species occur)")
    row = run.scored.loc[run.scored["sample_id"].astype(str) == key]
    if not row.empty:
        maps.scatter_wrapped(
            ax, row["true_lon"], row["true_lat"], marker="*", s=220, c="gold", edgecolors="black", zorder=4,
            label="truth", gid="truth",
        )
    markers = "os^vD<>phX"
    for i, r in enumerate(runs):
        m = r.scored.loc[r.scored["sample_id"].astype(str) == key]
        if m.empty or not np.isfinite(m["pred_lat"].to_numpy(dtype=float)).all():
            continue
        maps.scatter_wrapped(
            ax,
            m["pred_lon"],
            m["pred_lat"],
            marker=markers[i % len(markers)],
            s=60,
            edgecolors="black",
            zorder=3,
            label=f"{r.name}",
        )
    # Under the map: the whole globe has no empty corner (Antarctica fills the south).
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=min(len(runs) + 1, 6), fontsize=8,
              frameon=False)
    names = ", ".join(s for s, _ in species)
    week = int(meta.get("week", birdrange.YEAR_ROUND))
    when = "year-round" if week == birdrange.YEAR_ROUND else f"week {week} of 48"
    ax.set_title(f"{key}: where {names} occur ({when})", fontsize=9)
    return plots._save(fig, path), key


def section(ctx: SectionContext) -> str | None:
    """The section over the runs on the pipeline's data version; None without `birds_csv`."""
    if ctx.inputs.birds_csv is None:  # not asked for (e.g. `agl report` without the birds table)
        return None
    return birds_section(ctx.pipeline_runs, ctx.inputs.birds_csv, ctx.figs, ctx.tables, options=ctx.options)


def birds_section(runs, birds_csv: Path, figs: Path, tables: Path, *, options) -> str:
    """HTML of the section; its tables go to `tables/`, its map to `figs/`."""
    parts = ["<section id='birds-section'><h2>Birds: what an expert ear hears</h2>"]
    if not Path(birds_csv).exists():
        parts.append("<p>No BirdNET table (the birds stage did not run).</p></section>")
        return "\n".join(parts)
    birds = pd.read_csv(birds_csv, keep_default_na=False)
    heard = _birds_heard(birds)
    n_heard = sum(v == "birds heard" for v in heard.values())
    off = (birds["status"] == "off").all() if len(birds) else True
    if off:
        parts.append("<p>BirdNET tagging is switched off (params.yaml birds.enabled).</p></section>")
        return "\n".join(parts)
    parts.append(
        f"<p>BirdNET GLOBAL 6K V2.4 heard at least one species in <b>{n_heard}</b> of "
        f"{len(heard)} clips it listened to. On synthetic clips it should hear none, "
        "and birdrange then abstains (scored as a refusal).</p>"
    )
    parts += _by_birds_html(runs, heard, tables, options)
    br = find_birdrange(runs)
    if br is None:
        parts.append("<p>No birdrange run (add it to params.yaml models to compare).</p>")
    else:
        parts += _birdrange_html(br, runs, heard, figs, tables, options)
    parts.append("</section>")
    return "\n".join(parts)


def _by_birds_html(runs, heard: dict[str, str], tables: Path, options) -> list[str]:
    """Each run's error by birds heard (tables/birds_breakdown.csv)."""
    boot = {"bootstrap": options.group_bootstrap, "seed": options.seed}
    parts = [f"<p>{html.escape(breakdown_legend(options.min_support))}</p>"]
    tables_out = []
    for r in runs:
        t = by_birds(r.scored, heard, **boot).assign(run=r.name)
        tables_out.append(t)
        parts.append(f"<h4>{html.escape(r.name)}: error by birds heard</h4>")
        parts.append(breakdown_table(t.drop(columns="run"), f"birds-{slug(r.name)}", options.min_support))
    if tables_out:
        canonical.write_csv(pd.concat(tables_out, ignore_index=True), tables / "birds_breakdown.csv")
    return parts


def _birdrange_html(br, runs, heard: dict[str, str], figs: Path, tables: Path, options) -> list[str]:
    """The birdrange run beside each other run on the birds-heard clips, and its surface map."""
    refused = int(br.scored["refused"].sum())
    parts = [
        f"<p><b>{html.escape(br.name)}</b> abstained on {refused} of {len(br.scored)} "
        "clips (no species heard above its threshold; scored as refusals: 10,000 km "
        "under paper, the worst case under strict). It reads birdsong only, so on "
        "clips without birds its score means nothing about a model.</p>"
    ]
    keys = {k for k, v in heard.items() if v == "birds heard"}
    mine = br.scored[br.scored["sample_id"].astype(str).isin(keys)]
    rows = []
    for r in runs:
        if r is br:
            continue
        other = r.scored[r.scored["sample_id"].astype(str).isin(keys)]
        cmp = compare_runs(mine, other, n_boot=options.paired_bootstrap, n_perm=options.paired_permutations,
                           seed=options.seed, min_support=options.min_support)
        rows.append(cmp.assign(a=br.name, b=r.name))
    if rows and keys:
        paired = with_holm(pd.concat(rows, ignore_index=True),
                           f"this table: {br.name} against each run on birds-heard clips, every metric")
        canonical.write_csv(paired, tables / "birds_paired.csv")
        parts.append(
            f"<h3>{html.escape(br.name)} beside each run, birds-heard clips only</h3>"
            "<p>Difference birdrange - run on common clips, paired bootstrap 95% CI "
            f"and sign-flip permutation p-value; fewer than {options.min_support} common "
            f"scored clips: \"insufficient data (n = k, needs {options.min_support})\", none: "
            "\"—\" (not applicable).</p>"
        )
        parts.append(paired_table(paired, "birds-paired"))
    else:
        parts.append("<p>No clip with birds heard: nothing to compare birdrange on.</p>")
    drawn = surface_map(br, runs, figs / "birdrange_surface.png")
    if drawn is not None:
        path, key = drawn
        parts.append(img(path, f"{key}: birdrange's occurrence surface for the species heard, the truth (star) "
                               "and every run's guess", "birdrange-surface"))
    return parts
