"""What a score stands on: the predictions files that must not be scored, and how much of the
dataset the others cover.

A number printed with exit 0 must be publishable, so before a predictions file is scored:

* **cut off**: a last line that ends mid-record (a copy cut short, or a writer killed while
  writing) is refused. Resuming a run ignores such a line (the writer trims it and asks that
  clip again), but the records before it are not the run: which clips are missing is
  anybody's guess.
* **shorter than its run**: a run folder's `run_summary.json` (written by inference) says how
  many clips the run recorded; a `predictions.jsonl` beside it with fewer is a truncated file,
  even when it was cut at a line boundary, and is refused.
* **part of the manifest**: predictions for n of the manifest's N clips are scored (the
  `paper` protocol scores the clips that have a prediction, `strict` counts the rest as
  failures), with a warning that counts them; n / N is printed wherever the score is
  (`agl evaluate`'s table and JSON, the evaluate stage's lines, the leaderboard's `n / N`).
* **failed clips** (no reply: the call failed) score as failures under both protocols; they
  are counted in a warning that says how to retry them. A file whose every record is a
  failure holds no answer at all and is refused.
* **a re-parse** needs raw replies: `--reparse` of a published file without any is refused
  (agl.predictions.importer), and of this project's own predictions file too (its records
  were parsed when they were made; the flag is never ignored).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from agl.errors import AglError
from agl.predictions.records import Status, TornLineWarning
from agl.scoring.text import coverage_text


def torn_error(warning: TornLineWarning) -> AglError:
    """The one-line refusal of a file whose last line is cut off."""
    return AglError(
        f"{warning.path}: line {warning.line} is cut off mid-record (a copy cut short, or a "
        "run killed while writing), so the records before it are not the whole run and are "
        "not scored; rerun the inference that wrote it (a rerun drops the cut line and asks "
        "that clip again), or restore the complete file")


def check_run_summary(path: str | Path, frame: pd.DataFrame) -> None:
    """Refuse a run's predictions file that holds fewer clips than its run_summary.json says
    the run recorded (a file truncated at a line boundary looks whole otherwise)."""
    summary_path = Path(path).with_name("run_summary.json")
    if not summary_path.is_file():
        return
    try:
        recorded = json.loads(summary_path.read_text(encoding="utf-8")).get("n_recorded")
    except (OSError, ValueError, AttributeError):
        return  # not a run summary of ours: nothing to compare with
    if not isinstance(recorded, int) or isinstance(recorded, bool):
        return
    have = int(frame["sample_id"].nunique())
    if have < recorded:
        raise AglError(
            f"{path}: holds records for {have} clip(s), but {summary_path.name} beside it says "
            f"the run recorded {recorded}: the file is truncated; restore it (`dvc checkout "
            f"{path}` in the pipeline) or rerun the inference that wrote it")


@dataclass(frozen=True)
class Coverage:
    """Clips of the dataset with a prediction record (`predicted`) of all its clips (`clips`),
    and how many of those records are failures (no reply)."""

    predicted: int
    clips: int
    failed: int

    @classmethod
    def of(cls, manifest: pd.DataFrame, frame: pd.DataFrame) -> Coverage:
        keys = pd.Index(manifest["key"].astype(str))
        mine = frame[frame["sample_id"].isin(keys)]
        return cls(predicted=int(keys.isin(frame["sample_id"]).sum()), clips=len(keys),
                   failed=int((mine["status"] == Status.FAILED.value).sum()))

    def text(self) -> str:
        return coverage_text(self.predicted, self.clips)

    def refuse_without_answers(self, source: str) -> None:
        """A file whose every record (of the manifest's clips) is a failure holds no answer:
        its score would be the protocol's refusal distance, a number about nothing."""
        if self.predicted and self.failed == self.predicted:
            raise AglError(f"{source}: all {self.failed} records are failures (status failed: "
                           "no reply; the reasons are in their error field), so there is "
                           "nothing to score; fix the cause and rerun the inference")

    def warnings(self, source: str, *, retry: str = "rerun the inference to retry them") -> list[str]:
        """Counted warnings: a subset of the manifest, and clips without an answer."""
        out = []
        if self.predicted < self.clips:
            rest = self.clips - self.predicted
            out.append(f"{source}: {self.text()}; the paper protocol scores only those "
                       f"{self.predicted}, the strict protocol counts the other {rest} as "
                       "failures")
        if self.failed:
            out.append(f"{source}: {self.failed} of {self.clips} clip(s) have no answer (status "
                       f"failed: the call failed) and score as failures; {retry}")
        return out
