"""The report's error modes of one run: the judge's table where the judge stage wrote one, else
the record's rule alone (`agl.judges.modes.classify`: Refusal, Failure, "Unjudged").

The report calls no model: the judge's LLM calls are the stage `judge`'s
(`agl.judges.error_modes`), cached by DVC; this module only reads their table.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from agl.judges.modes import COLUMNS, classify
from agl.report.inputs import RunInput

TABLE = "error_modes.csv"


def judge_table(judges_dir: Path | None, run: str) -> Path | None:
    """`<judges_dir>/<run>/error_modes.csv` where the judge stage wrote it, else None."""
    path = Path(judges_dir) / run / TABLE if judges_dir else None
    return path if path is not None and path.exists() else None


def run_modes(run: RunInput, judges_dir: Path | None, *, wrong_km: float) -> pd.DataFrame:
    """One row per wrong prediction of `run`: sample_id, mode, source, why."""
    path = judge_table(judges_dir, run.name)
    if path is None:
        return classify(run.scored, wrong_km=wrong_km)
    return pd.read_csv(path, dtype=str, keep_default_na=False).reindex(columns=list(COLUMNS))
