"""What a table prints where it gives no number: one wording, shared by every table agl writes.

The leaderboard (`agl.scoring.leaderboard`), the report's breakdowns and paired tables
(`agl.report.tables`), its Birds section (`agl.report.birds`) and its counterfactual section
(`agl.counterfactual.report_section`) all use these, so one case never reads two ways:

* **not applicable**, printed "—": the metric is scored on none of the clips, so there is
  nothing to estimate. A field the run never gives (a coordinates-only baseline has no country,
  `agl.scoring.protocol_paper`), or clips without a true value (AGL1K's Vatican rows have no
  continent). n = 0 is always this, never "insufficient data".
* **insufficient data (n = k, needs m)**: the metric is scored on k clips, fewer than the
  minimum support m (params `report.min_support`, `counterfactual.min_support`); the estimate
  is withheld.
"""

from __future__ import annotations

NOT_APPLICABLE = "—"
# The legend under a table that shows NOT_APPLICABLE.
NOT_APPLICABLE_LEGEND = (
    "—: not applicable: the metric is scored on none of these clips (a field the run never "
    "gives, e.g. a coordinates-only baseline's country, or clips with no true value)."
)


def insufficient(n: int, needs: int, what: str = "") -> str:
    """The one wording used wherever an estimate is withheld for lack of support."""
    return f"insufficient data (n = {n}{what}, needs {needs})"


def withheld(n: int, needs: int, what: str = "") -> str | None:
    """What to print instead of an estimate on `n` scored clips: "—" for none, the
    insufficient-data wording below `needs`, None when the estimate stands."""
    if n <= 0:
        return NOT_APPLICABLE
    if n < needs:
        return insufficient(n, needs, what)
    return None
