"""What `agl infer` and the stage `infer@<name>` share around one run: the batch jobs' status
and cancel, and how a finished pass ends (its exit code and the line saying why).

Exit codes: 0 a run with answers; 75 (EX_TEMPFAIL: come back later) while batch clips are
out, so DVC locks no unfinished run; 1 when no clip succeeded, so nothing scores a run of
failures. `rerun` names what runs it again where the caller is (the same command, or the
stage's `dvc repro`), so both say the same thing in the same words.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agl.contracts.models import ModelSpec
from agl.inference.batch.control import cancel_lines, status_lines
from agl.inference.batch.report import pending
from agl.inference.runspec import InferSettings

BATCH_PENDING = 75  # EX_TEMPFAIL
NOTHING_SUCCEEDED = 1


def batch_control(spec: ModelSpec, infer: InferSettings, out_dir: str | Path, *,
                  cancel: bool) -> int:
    """Print the run folder's batch jobs (`--batch-status`), or cancel them (`--batch-cancel`);
    sends no request. Returns the exit code (0)."""
    act = cancel_lines if cancel else status_lines
    for line in act(spec.backend, spec.model, spec.settings, out_dir,
                    timeout_s=float(infer.timeout_s)):
        print(line)
    return 0


def finish_run(summary: dict[str, Any], *, who: str, out_dir: str | Path, rerun: str) -> int:
    """The exit code of a run that returned `summary`, with one line on stderr (prefixed by
    `who`) where it is not 0: clips still with the batch API, or no clip succeeded."""
    out = pending(summary)
    if out:
        # Not an error and not a finished run: come back later.
        print(f"{who}: {out} clip(s) still with the batch API (jobs submitted); run {rerun} "
              "again later to collect them", file=sys.stderr)
        return BATCH_PENDING
    if summary["n_recorded"] and summary["n_failed"] == summary["n_recorded"]:
        print(f"{who}: error: no clip succeeded (all {summary['n_failed']} failed; the reasons "
              f"are in the error field of {out_dir}/predictions.jsonl); fix the cause, then run "
              f"{rerun} again", file=sys.stderr)
        return NOTHING_SUCCEEDED
    return 0
