"""A retired model in batch mode stops the run as the synchronous path does: one line
(agl.errors.ModelGone), no record written for any clip, at most one request besides the
refused job (through the real SDKs against tests/fake_batch.py)."""

from __future__ import annotations

import pytest
from fake_batch import FakeBatchService, Result
from test_batch_runs import keys, make_clips, run_until_done, settings  # noqa: F401 - keys: autouse fixture

from agl.errors import ModelGone

GONE = {"openai": (404, "The model `fake` does not exist or you do not have access to it."),
        "gemini": (404, "models/fake is not found for API version v1beta, or is not supported "
                        "for batchGenerateContent.")}


@pytest.mark.parametrize("at", ["create", "results"])
@pytest.mark.parametrize("variant", ["openai", "gemini-inline"])
def test_a_retired_model_in_batch_mode_stops_the_run(tmp_path, variant, at):
    """`create`: the provider refuses the job; `results`: it accepts the job and every line
    comes back 404 for the model."""
    api = variant.split("-")[0]
    manifest, audio = make_clips(tmp_path, 6)
    service = FakeBatchService(lambda req: Result(error=GONE[api]))
    if at == "create":
        service.reject_create = GONE[api]
    with service:
        with pytest.raises(ModelGone) as gone:
            run_until_done(variant, manifest, audio, tmp_path / "out", tmp_path / "cache",
                           settings(variant, service.url))
    assert "fake" in str(gone.value) and "gone" in str(gone.value), str(gone.value)
    assert len(service.sync_requests) <= 1, len(service.sync_requests)
    preds = tmp_path / "out" / "predictions.jsonl"
    assert not preds.exists() or not preds.read_text().strip()
