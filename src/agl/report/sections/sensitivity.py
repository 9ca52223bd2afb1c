"""The report's section "Localizability: sensitivity to γ and θ": scripts/sensitivity-sweep's
table (`agl.curation.sensitivity`), shown while the table exists."""

from __future__ import annotations

from pathlib import Path

from agl.curation.sensitivity import report_section
from agl.report.sections import SectionContext


def section(ctx: SectionContext) -> str | None:
    """The section's HTML, its figure drawn into `ctx.figs`; None without the sweep's table."""
    sweep = ctx.inputs.sensitivity_csv
    if sweep is None or not Path(sweep).exists():
        return None
    return report_section(Path(sweep), ctx.figs)
