"""The report's section "Stability over repeats": for every run asked several times
(params.yaml `infer.repeats`, agl.scoring.repeats), how much its numbers move from one asking
to the next. None (no trace on the page) while no run has repeats.

One row per such run: the repeats, the mean distance and the country accuracy as mean ± std
over the repeats, the expected and the consensus country accuracy, the agreement and the
flip rate (the share of clips whose country changes between repeats). The table is also
written to `tables/stability.csv`.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical
from agl.report.sections import SectionContext
from agl.report.tables import frame_table

INTRO = ("A model that samples (temperature above 0) answers a clip differently each time it "
         "is asked, so one run's accuracy carries noise that no interval over clips shows. "
         "These runs were asked {n} times each (params.yaml <code>infer.repeats</code>): "
         "each headline number as mean ± standard deviation over the repeats, the accuracy "
         "one run scores on average (expected), the accuracy of the majority country "
         "(consensus), how often the repeats agree with that majority, and the share of clips "
         "whose country flips between repeats (how often an answer changes: flips both ways "
         "cancel in the mean, so it is no measure of a run's noise). The noise of a run's "
         "accuracy is its standard deviation over the repeats: a difference between two runs, "
         "or an intervention's effect, within about two of them is within the model's own "
         "noise. lmms-eval's consensus accuracy (right in most repeats) and consistency rate "
         "(same correctness every time) are in metrics.json (docs/metrics.md#repeats).")


def repeats_of(run: Any, protocol: str) -> dict[str, Any] | None:
    """A run's repeats section under `protocol`: as collect_runs kept it (it read metrics.json
    for the protocol the report uses), or from metrics.json for a run given otherwise."""
    if "repeats" in run.info:
        return run.info["repeats"]
    metrics = run.info.get("metrics")
    if not metrics or not Path(metrics).exists():
        return None
    doc = json.loads(Path(metrics).read_text())
    return ((doc.get("protocols") or {}).get(protocol) or {}).get("repeats")


def _pm(metric: dict[str, Any], digits: int) -> str:
    mean, std = metric.get("mean"), metric.get("std")
    if mean is None:
        return "—"
    return f"{mean:.{digits}f}" + ("" if std is None else f" ± {std:.{digits}f}")


def section(ctx: SectionContext) -> str | None:
    rows = []
    for run in ctx.runs:
        rep = repeats_of(run, ctx.options.protocol)
        if not rep:
            continue
        m = rep["metrics"]
        rows.append({"run": run.name, "repeats": rep["n_repeats"], "clips": rep["n_clips"],
                     "mean km": _pm(m["distance_error_km"], 1),
                     "country acc": _pm(m["country_acc"], 3),
                     "expected country acc": rep["expected_country_acc"],
                     "consensus country acc": rep["consensus_country_acc"],
                     "agreement": rep["agreement"], "flip rate": rep["flip_rate"]})
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    canonical.write_csv(frame, ctx.tables / "stability.csv")
    counts = sorted({int(r["repeats"]) for r in rows})
    n = " or ".join(str(c) for c in counts)
    return ("<section id='stability-section'><h2>Stability over repeats</h2>"
            f"<p>{INTRO.format(n=html.escape(n))}</p>"
            f"{frame_table(frame, 'stability-table')}</section>")
