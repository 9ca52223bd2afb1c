"""The report's section "What the models listen to": the counterfactual stage's paired effects.

One figure per model (each intervention's effect on mean km, with its 95% CI, on all clips,
speech clips and non-speech clips), dose-response curves for graded interventions, and a
table. Plugged into `agl.report.build.build_report` through its `sections` hook.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from agl.core import canonical

GROUPS = (
    ("all", "all clips", "#333333"),
    ("speech", "speech clips", "#d62728"),
    ("non_speech", "non-speech clips", "#1f77b4"),
)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def read_effects(path: Path) -> pd.DataFrame:
    """effects.csv with names kept as text (an intervention called `null` or `NA` is a name)."""
    text = ("model", "intervention", "kind", "level", "group", "metric", "note")
    frame = pd.read_csv(
        path,
        dtype={c: str for c in text},
        keep_default_na=False,
        na_values={
            c: ["", "nan", "NaN"]
            for c in ("value", "mean_original", "mean_perturbed", "diff", "ci_lo", "ci_hi", "p_value")
        },
    )
    if "note" not in frame:
        frame["note"] = ""
    return frame


def effect_figure(effects: pd.DataFrame, model: str, path: Path) -> Path:
    """Delta mean km per intervention level (rows), one marker per clip group, CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    km = effects[(effects["model"] == model) & (effects["metric"] == "distance_km")]
    km = km[km["diff"].notna()]  # groups below minimum support have no estimate to draw
    labels = sorted({(r.intervention, r.level) for r in km.itertuples()})
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.55 * len(labels)))
    for j, (group, label, colour) in enumerate(GROUPS):
        part = km[km["group"] == group].set_index(["intervention", "level"])
        for i, key in enumerate(labels):
            if key not in part.index:
                continue
            r = part.loc[key]
            y = i + (j - 1) * 0.22
            ax.errorbar(
                r["diff"],
                y,
                xerr=[[r["diff"] - r["ci_lo"]], [r["ci_hi"] - r["diff"]]],
                fmt="o",
                color=colour,
                capsize=3,
                label=label if i == 0 else None,
            )
    ax.axvline(0, color="#888", lw=1)
    ax.set_yticks(range(len(labels)), [f"{a} ({b})" if b != "default" else a for a, b in labels])
    ax.invert_yaxis()
    ax.set_xlabel("change in mean distance error (km), perturbed - original; > 0 is a loss")
    ax.set_title(f"{model}: effect of each intervention (95% paired bootstrap CI)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        ax.set_title(f"{model}: {name} ({part['kind'].iloc[0]})")
        ax.set_xlabel(part["level"].iloc[0].rsplit("_", 1)[0])
        ax.set_ylabel("change in mean km")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def section(effects_csv: Path, figs: Path, img, tables: Path | None = None) -> str:
    """The section's HTML; `img(path, alt, id)` inlines a figure (the report's helper);
    the full table (every group, continents included) is copied into `tables`."""
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
        slug = _slug(model)
        parts.append(f"<h3>{html.escape(model)}</h3>")
        mine = effects[(effects["model"] == model) & (effects["metric"] == "distance_km")]
        if mine["diff"].isna().all():
            parts.append(
                "<p class='insufficient'>No effect estimated: every group has fewer paired "
                "clips than the minimum support (the table gives each n).</p>"
            )
            continue
        parts.append(
            img(
                effect_figure(effects, model, figs / f"listen_{slug}.png"),
                f"{model}: change in mean km under each intervention",
                f"listen-{slug}",
            )
        )
        dose = dose_figure(effects, model, figs / f"listen_dose_{slug}.png")
        if dose is not None:
            parts.append(img(dose, f"{model}: dose-response of graded interventions", f"listen-dose-{slug}"))
    head = ["model", "intervention", "level", "clips", "metric", "original", "perturbed", "change [95% CI]", "p"]
    rows = []
    for r in effects[effects["group"].isin([g for g, _, _ in GROUPS])].itertuples():
        d = 1 if r.metric == "distance_km" else 3
        if r.note:
            rows.append([r.model, r.intervention, r.level, f"{r.group.replace('_', '-')} (n = {r.n})",
                         r.metric, "", "", r.note, ""])
            continue
        rows.append(
            [
                r.model,
                r.intervention,
                r.level,
                f"{r.group.replace('_', '-')} (n = {r.n})",
                r.metric,
                f"{r.mean_original:,.{d}f}",
                f"{r.mean_perturbed:,.{d}f}",
                f"{r.diff:+,.{d}f} [{r.ci_lo:+,.{d}f}, {r.ci_hi:+,.{d}f}]",
                f"{r.p_value:.4f}",
            ]
        )
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    parts.append(
        f"<table id='listen-table'><thead><tr>{th}</tr></thead><tbody>{body}</tbody>"
        "</table><p>By continent: <code>tables/listen_effects.csv</code>.</p>"
    )
    parts.append("</section>")
    return "\n".join(parts)
