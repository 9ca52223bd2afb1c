"""How the localizability selection responds to γ (gamma_km) and θ (theta).

The paper fixes γ (the error below which a clip counts as "good") and θ (the l_k above
which a clip is highly localizable) without an ablation. `scripts/sensitivity-sweep` runs
the `localize` stage over a grid as queued DVC experiments and hands each experiment's
per-clip table (`build/curation/localizability/clips.csv`) to `compare`, which measures the
change against the default selection:

  jaccard        |S ∩ S0| / |S ∪ S0| of the selected keys (1: the same set)
  selected       |S|
  speech_share   share of S with speech
  rank_rho       Spearman correlation of l_k with the default l_k on the held-out clips
                 (does the ranking of clips the weights never saw survive the change?)
  holdout_rho    the experiment's own held-out check: Spearman(l_k, reference error)

The table lives in git (`metrics/sensitivity.csv`, rounded to 6 decimals); the report shows
it with a plot (`section`).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import diskwrite
from agl.scoring.wording import NOT_APPLICABLE

COLUMNS = [
    "gamma_km",
    "theta",
    "selected",
    "jaccard",
    "speech_share",
    "rank_rho",
    "holdout_rho",
    "experiment",
    "status",
]


def _selected(clips: pd.DataFrame) -> set[str]:
    return set(clips.loc[clips["selected"].astype(bool), "key"].astype(str))


def compare(default: pd.DataFrame, exp: pd.DataFrame) -> dict[str, Any]:
    """One experiment's clips.csv against the default's (see the module docstring)."""
    from scipy.stats import spearmanr

    s0, s = _selected(default), _selected(exp)
    union = s0 | s
    speech = exp.loc[exp["selected"].astype(bool), "has_speech"].astype(bool)
    held = default.loc[default["split"] == "holdout", ["key", "l_k"]].merge(
        exp[["key", "l_k"]], on="key", suffixes=("_0", "")
    )
    rho = None
    if len(held) >= 3 and held["l_k_0"].nunique() > 1 and held["l_k"].nunique() > 1:
        rho = float(spearmanr(held["l_k_0"], held["l_k"]).statistic)

    def r(v: float | None) -> float | None:
        return None if v is None else round(float(v), 6)

    return {
        "selected": len(s),
        "jaccard": r(len(s & s0) / len(union) if union else 1.0),
        "speech_share": r(float(speech.mean()) if len(speech) else None),
        "rank_rho": r(rho),
    }


def sweep_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows (gamma_km, theta, compare()'s fields, holdout_rho, experiment) sorted by grid."""
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["gamma_km", "theta", "experiment"], kind="stable").reset_index(drop=True)


def plot(table: pd.DataFrame, path: Path) -> Path:
    """Jaccard against the default selection (left) and the selected set's size (right)
    over the γ × θ grid, one line per θ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), constrained_layout=True)
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-.")]
    ok = table[table["status"].fillna("ok") == "ok"] if "status" in table else table
    for i, (theta, part) in enumerate(ok.groupby("theta", sort=True)):
        part = part.sort_values("gamma_km")
        marker, line = styles[i % len(styles)]
        # Lines that coincide (θ without effect) stay visible: distinct markers and dashes.
        kw = {
            "marker": marker,
            "linestyle": line,
            "markersize": 8 - 2 * (i % 3),
            "alpha": 0.85,
            "label": f"θ = {theta:g}",
        }
        axes[0].plot(part["gamma_km"], part["jaccard"], **kw)
        axes[1].plot(part["gamma_km"], part["selected"], **kw)
    axes[0].set(xlabel="γ (km)", ylabel="Jaccard vs default selection", ylim=(-0.02, 1.02))
    axes[1].set(xlabel="γ (km)", ylabel="clips selected")
    axes[1].legend(fontsize=8)
    with diskwrite.atomic_file(path) as fh:
        fig.savefig(fh, dpi=110, format=path.suffix.lstrip(".").lower() or "png")
    plt.close(fig)
    return path


def section(table: pd.DataFrame, figure: Path | None) -> str:
    """The report's HTML section for a sweep table (a note when no sweep was run)."""
    head = "<section id='sensitivity-section'><h2>Localizability: sensitivity to γ and θ</h2>"
    if table.empty:
        return (
            head + "<p>No sweep recorded (metrics/sensitivity.csv is empty); run "
            '<code>scripts/sensitivity-sweep</code> (README, "Sensitivity of the '
            'selection").</p></section>'
        )
    cells, empty = [], []
    for _, row in table.iterrows():
        # An experiment that selects no clip has no selection to describe: its speech share
        # and the rank correlation of its l_k (whose ranking selects nothing) are not
        # applicable, whatever number the l_k of the held-out clips give (kept in the CSV).
        none = pd.notna(row["selected"]) and int(row["selected"]) == 0
        if none:
            empty.append(f"γ = {row['gamma_km']:g} km, θ = {row['theta']:g}")

        def text(c: str, row=row, none=none) -> str:
            if none and c in ("speech_share", "rank_rho"):
                return NOT_APPLICABLE
            return "" if pd.isna(row[c]) else str(row[c])

        cells.append("<tr>" + "".join(f"<td>{html.escape(text(c))}</td>" for c in COLUMNS) + "</tr>")
    parts = [
        head,
        "<p>Each row is one queued DVC experiment of the localize stage; Jaccard "
        "and the rank correlation (Spearman, held-out clips) compare it with the default "
        "selection.</p>",
    ]
    if figure is not None and figure.exists():
        data = base64.b64encode(figure.read_bytes()).decode("ascii")
        parts.append(
            f"<figure><img id='sensitivity' alt='sensitivity' "
            f"src='data:image/png;base64,{data}'><figcaption>Jaccard against the "
            "default selection and selected size over γ, one line per θ"
            "</figcaption></figure>"
        )
    parts.append(
        "<table id='sensitivity-table'><tr>"
        + "".join(f"<th>{c}</th>" for c in COLUMNS)
        + "</tr>"
        + "".join(cells)
        + "</table>"
    )
    if empty:
        parts.append(
            "<p class='note'>" + html.escape(
                f"{'; '.join(empty)}: the experiment selects no clip, so speech_share and "
                f"rank_rho are {NOT_APPLICABLE} (not applicable: there is no selection to "
                "describe, and a ranking that selects nothing is not compared). "
                "metrics/sensitivity.csv keeps the number its l_k give.") + "</p>"
        )
    parts.append("</section>")
    return "\n".join(parts)


def report_section(table_csv: Path, plots_dir: Path) -> str:
    """The section's HTML, its figure drawn into `plots_dir` (the report stage's hook)."""
    table = pd.read_csv(table_csv) if table_csv.stat().st_size else pd.DataFrame(columns=COLUMNS)
    figure = plot(table, plots_dir / "sensitivity.png") if not table.empty else None
    return section(table, figure)


def add_to_report(report_html: Path, table_csv: Path, plots_dir: Path) -> None:
    """Insert the section before the provenance of a report already written."""
    text = report_html.read_text(encoding="utf-8")
    marker = "<section id='provenance'>"
    block = report_section(table_csv, plots_dir) + "\n"
    text = text.replace(marker, block + marker, 1) if marker in text else text + block
    diskwrite.write_text(report_html, text)
