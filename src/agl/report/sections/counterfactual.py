"""The report's section "What the models listen to": the counterfactual stage's paired effects.

One figure per model (each intervention's effect on mean km, with its 95% CI, on all clips,
speech clips and non-speech clips), dose-response curves for graded interventions, and a
table. A section of `agl.report.sections` (moved here from agl.counterfactual, which imports
nothing of the report).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from agl.core import canonical
from agl.report import plots
from agl.report.sections import SectionContext
from agl.report.tables import gap_cell, img, table
from agl.scoring.wording import NOT_APPLICABLE, NOT_APPLICABLE_LEGEND

GROUPS = (
    ("all", "all clips", "#333333"),
    ("speech", "speech clips", "#d62728"),
    ("non_speech", "non-speech clips", "#1f77b4"),
)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def read_effects(path: Path) -> pd.DataFrame:
    """effects.csv with names kept as text (an intervention called `null` or `NA` is a name)."""
    text = ("model", "intervention", "kind", "level", "group", "metric", "note", "family")
    frame = pd.read_csv(
        path,
        dtype={c: str for c in text},
        keep_default_na=False,
        na_values={
            c: ["", "nan", "NaN"]
            for c in ("value", "mean_original", "mean_perturbed", "diff", "ci_lo", "ci_hi", "p_value", "p_holm")
        },
    )
    if "note" not in frame:
        frame["note"] = ""
    return frame


# Vertical distance between the groups' markers of one intervention level (axis units; the
# levels are 1 apart).
GROUP_STEP = 0.22


def effect_rows(effects: pd.DataFrame, model: str) -> list[tuple[str, list[tuple[pd.Series, float]]]]:
    """What the effect figure draws: per intervention level (top to bottom) its label and its
    groups' estimates (rows of effects.csv), each at its y. The markers of a level are centred
    on its label's y (the level's index), whichever groups have an estimate (a group below
    minimum support has none and is not drawn)."""
    km = effects[(effects["model"] == model) & (effects["metric"] == "distance_km")]
    km = km[km["diff"].notna()]
    out = []
    for i, ((name, level), part) in enumerate(km.groupby(["intervention", "level"], sort=True)):
        by_group = {r["group"]: r for _, r in part.iterrows()}
        rows = [by_group[g] for g, _, _ in GROUPS if g in by_group]
        offsets = (np.arange(len(rows)) - (len(rows) - 1) / 2) * GROUP_STEP
        label = f"{name} ({level})" if level != "default" else name
        out.append((label, [(r, float(i + o)) for r, o in zip(rows, offsets, strict=True)]))
    return out


def effect_figure(effects: pd.DataFrame, model: str, path: Path) -> Path:
    """Delta mean km per intervention level (rows, labelled on their markers), one marker per
    clip group with an estimate, CI bars. SVG ids: effect-<group>."""
    plt = plots._plt()
    rows = effect_rows(effects, model)
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.55 * len(rows)))
    style = {g: (label, colour) for g, label, colour in GROUPS}
    drawn = set()
    for _, points in rows:
        for r, y in points:
            label, colour = style[r["group"]]
            ax.errorbar(r["diff"], y, xerr=[[r["diff"] - r["ci_lo"]], [r["ci_hi"] - r["diff"]]],
                        fmt="o", color=colour, capsize=3, gid=f"effect-{r['group']}",
                        label=None if r["group"] in drawn else label)
            drawn.add(r["group"])
    ax.axvline(0, color="#888", lw=1)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first level on top, half a level of margin
    ax.set_xlabel("change in mean distance error (km), perturbed - original; > 0 is a loss")
    ax.set_title(f"{model}: effect of each intervention (95% paired bootstrap CI)")
    # Below the axes: inside, the legend sat on the top level's interval.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3 if len(rows) < 4 else -0.15),
              ncol=len(GROUPS), fontsize=8, frameon=False)
    return plots._save(fig, path)


def dose_figure(effects: pd.DataFrame, model: str, path: Path) -> Path | None:
    """Delta mean km against the graded parameter, one panel per graded intervention."""
    km = effects[
        (effects["model"] == model)
        & (effects["metric"] == "distance_km")
        & effects["value"].notna()
        & effects["diff"].notna()
    ]
    graded = [n for n, g in km.groupby("intervention") if g["level"].nunique() > 1]
    if not graded:
        return None
    plt = plots._plt()
    fig, axes = plt.subplots(1, len(graded), figsize=(5 * len(graded), 3.6), squeeze=False)
    for ax, name in zip(axes[0], sorted(graded), strict=True):
        part = km[km["intervention"] == name]
        for group, label, colour in GROUPS:
            g = part[part["group"] == group].sort_values("value")
            if g.empty:
                continue
            ax.plot(g["value"], g["diff"], "o-", color=colour, label=label)
            ax.fill_between(g["value"], g["ci_lo"], g["ci_hi"], color=colour, alpha=0.15)
        ax.axhline(0, color="#888", lw=1)
        kind = str(part["kind"].iloc[0])
        ax.set_title(f"{model}: {name}" + (f" ({kind})" if kind != name else ""))
        ax.set_xlabel(part["level"].iloc[0].rsplit("_", 1)[0])
        ax.set_ylabel("change in mean km")
        ax.legend(fontsize=8)
    return plots._save(fig, path)


def section(ctx: SectionContext) -> str | None:
    """The section from the counterfactual stage's folder; None when it is not given."""
    if ctx.inputs.counterfactual_dir is None:
        return None
    page = listen_section(Path(ctx.inputs.counterfactual_dir) / "effects.csv", ctx.figs, ctx.tables)
    floors = noise_floors(ctx)
    if not floors:
        return page
    body, end = page.rsplit("</section>", 1)
    return body + floors + "</section>" + end


def noise_floors(ctx: SectionContext) -> str:
    """For each model asked several times (infer.repeats), its flip rate at no intervention:
    the share of clips whose country changes between repeats, the noise an intervention's
    effect on country accuracy must exceed (agl.scoring.repeats); "" when none was."""
    from agl.report.sections.stability import repeats_of  # the same reading of metrics.json

    lines = []
    for run in ctx.runs:
        rep = repeats_of(run, ctx.options.protocol)
        if rep and rep.get("flip_rate") is not None:
            acc = rep["metrics"]["country_acc"]
            spread = ("no spread measured" if acc.get("std") is None
                      else f"country accuracy SD {acc['std']:.3f} over {rep['n_repeats']} repeats")
            lines.append(f"<li>{html.escape(run.name)}: {spread} (and {rep['flip_rate']:.1%} of "
                         "clips change country between repeats)</li>")
    if not lines:
        return ""
    return ("<p>Noise floor: with no intervention, a model asked several times (params.yaml "
            "<code>infer.repeats</code>) does not score the same every time. An effect on country "
            "accuracy within about two standard deviations of its accuracy over repeats is within "
            "the model's own noise (the flip rate counts changed answers, which cancel in the "
            "mean: it is not that noise):</p><ul>" + "".join(lines) + "</ul>")


def listen_section(effects_csv: Path, figs: Path, tables: Path | None = None) -> str:
    """The section's HTML; the full table (every group, continents included) is copied into
    `tables`."""
    parts = ["<section id='listen-section'><h2>What the models listen to</h2>"]
    if not Path(effects_csv).exists():
        parts.append("<p>No counterfactual runs (build/counterfactual/effects.csv absent).</p></section>")
        return "\n".join(parts)
    effects = read_effects(effects_csv)
    if tables is not None:
        canonical.write_csv(effects, Path(tables) / "listen_effects.csv")
    if effects.empty:
        parts.append(
            "<p>No counterfactual runs (params.yaml counterfactual.models or .interventions is empty).</p></section>"
        )
        return "\n".join(parts)
    parts.append(
        "<p>Each intervention changes the audio in one controlled way (params.yaml "
        "<code>perturb:</code>); the same model then hears the changed clips. Effects are "
        "<b>perturbed - original</b> on the same clips: a positive change in km, or a negative "
        "change in accuracy, is a loss. 95% paired bootstrap intervals; p: sign-flip "
        "permutation test of no change. A group with fewer paired clips than the minimum "
        "support (params.yaml <code>counterfactual.min_support</code>) gets its n and "
        "\"insufficient data\" instead of an estimate, and is not drawn.</p>"
    )
    for model in sorted(effects["model"].unique()):
        parts += _model_figures(effects, model, figs)
    parts.append(_effects_table(effects))
    parts.append(_length_table(effects))
    if (effects["note"] == NOT_APPLICABLE).any():
        parts.append(f"<p class='note'>{html.escape(NOT_APPLICABLE_LEGEND)}</p>")
    parts.append("<p>By continent: <code>tables/listen_effects.csv</code>.</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _model_figures(effects: pd.DataFrame, model: str, figs: Path) -> list[str]:
    """One model's heading, its effect figure and (graded interventions) its dose-response."""
    slug = _slug(model)
    parts = [f"<h3>{html.escape(model)}</h3>"]
    mine = effects[(effects["model"] == model) & (effects["metric"] == "distance_km")]
    if mine["diff"].isna().all():
        parts.append(
            "<p class='insufficient'>No effect estimated: every group has fewer paired "
            "clips than the minimum support (the table gives each n).</p>"
        )
        return parts
    parts.append(img(effect_figure(effects, model, figs / f"listen_{slug}.png"),
                     f"{model}: change in mean km under each intervention", f"listen-{slug}"))
    dose = dose_figure(effects, model, figs / f"listen_dose_{slug}.png")
    if dose is not None:
        parts.append(img(dose, f"{model}: dose-response of graded interventions", f"listen-dose-{slug}"))
    return parts


def _effects_table(effects: pd.DataFrame) -> str:
    """The table of every model's effects on all, speech and non-speech clips."""
    holm = "p_holm" in effects and effects["p_holm"].notna().any()  # tables before issue 46: raw p
    head = ["model", "intervention", "level", "group", "n", "clusters", "metric", "original",
            "perturbed", "change [95% CI]", "p", *(["p (Holm, per model)"] if holm else [])]
    rows = []
    for r in effects[effects["group"].isin([g for g, _, _ in GROUPS])].itertuples():
        d = 1 if r.metric == "distance_km" else 3
        clusters = getattr(r, "n_clusters", r.n)  # effects tables before issue 31: clips alone
        first = [r.model, r.intervention, r.level, r.group.replace("_", "-"), f"{r.n:,}",
                 f"{int(clusters):,}", r.metric]
        if r.note:  # "—" (no paired clip scored) or "insufficient data (...)": agl.scoring.wording
            rows.append([*first, gap_cell(r.note, 5 if holm else 4)])
            continue
        rows.append([*first, f"{r.mean_original:,.{d}f}", f"{r.mean_perturbed:,.{d}f}",
                     f"{r.diff:+,.{d}f} [{r.ci_lo:+,.{d}f}, {r.ci_hi:+,.{d}f}]", f"{r.p_value:.4f}",
                     *([f"{r.p_holm:.4f}"] if holm else [])])
    return table(head, rows, "listen-table")


def _length_table(effects: pd.DataFrame) -> str:
    """One model's long-audio protocols against its reference run by quartile of clip length
    (counterfactual.long_audio, issue 45): where hearing more of a clip helps; "" without."""
    rows_of = effects[(effects["intervention"] == "long_audio") & effects["group"].str.startswith("duration=")]
    if rows_of.empty:
        return ""
    head = ["reference", "run", "heard", "clip length", "n", "clusters", "metric", "reference",
            "run", "change [95% CI]", "p"]
    rows = []
    for r in rows_of.itertuples():
        d = 1 if r.metric == "distance_km" else 3
        first = [r.model, r.level, r.kind, r.group.removeprefix("duration="), f"{r.n:,}",
                 f"{int(r.n_clusters):,}", r.metric]
        if r.note:
            rows.append([*first, gap_cell(r.note, 4)])
            continue
        rows.append([*first, f"{r.mean_original:,.{d}f}", f"{r.mean_perturbed:,.{d}f}",
                     f"{r.diff:+,.{d}f} [{r.ci_lo:+,.{d}f}, {r.ci_hi:+,.{d}f}]", f"{r.p_value:.4f}"])
    return ("<h3 id='long-audio-by-length'>Hearing more, by clip length</h3><p>One model under "
            "several long-audio protocols (params.yaml <code>counterfactual.long_audio</code>): "
            "each run against the reference run (its first listed) on the same clips, by quartile "
            "of the clips' length (the manifest's seconds). A negative change in km, or a positive "
            "change in accuracy, is where hearing more helps.</p>" + table(head, rows, "long-audio-length-table"))
