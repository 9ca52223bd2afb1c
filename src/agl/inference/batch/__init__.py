"""Closed-model runs through the providers' batch APIs: half the price, up to a day's wait.

A model entry with `settings: {mode: batch}` (or `agl infer --batch`) sends the run's
requests as batch jobs instead of one call each. A run is then several passes of the same
command (`dvc repro`, `agl infer ...`): each pass collects what finished, submits what is
new, and returns at once, saying what is still out. Every pass is safe to kill:

* `agl.inference.batch.state`    the jobs beside the run (`<run>/batch_state.json`): ids, files,
                                 which clips each job holds, when it expires; a new machine or
                                 day resumes it.
* `agl.inference.batch.run`      one pass: poll, collect (results matched by custom id), fall
                                 back, probe, submit; a clip is in at most one live job.
* `agl.inference.batch.submit`   screening and submission: request files within the provider's
                                 limits.
* `agl.inference.batch.context`  what a pass carries and reports.
* `agl.inference.batch.report`   the summary's batch section, the clips still out, its line.
* `agl.inference.batch.control`  `--batch-status` and `--batch-cancel`.
* `agl.inference.batch.providers` one module per provider's API (`openai`, `gemini`).

The `batch` executor (`agl.inference.executors.batch`) runs a pass for the run driver and
sends the clips batch does not take through the `local` executor; every answer, collected
or synchronous, becomes a record in the driver (`agl.inference.sink`).

The requests are the synchronous path's own (same prompt, settings and audio bytes), so a
batch reply lands in the same content-addressed cache and parses into the same record.
See docs/batch.md.
"""

from agl.inference.batch.options import BATCH_BACKENDS, STATE_FILE, BatchOptions, batch_options, is_batch

__all__ = ["BATCH_BACKENDS", "STATE_FILE", "BatchOptions", "batch_options", "is_batch"]
