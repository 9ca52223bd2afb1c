"""`replay`: serve predictions imported from a published result file.

The authors' outputs then go through the same runner, files and scorer as fresh runs, so
they sit in the same leaderboard. Settings: `source` (path of the published file, read by
`agl.predictions.importer.import_published`) and `reparse` (run this project's parser on the raw text
instead of keeping the authors' parsed fields). A clip the file has no row for is a
failure that says so, never a made-up answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agl.backends.base import Backend
from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.errors import AglError
from agl.predictions.importer import import_published


class Replay(Backend):
    name = "replay"  # its entry in the index (agl.backends)
    needs_audio = False
    recompute = True  # a published file read again: a rerun never trusts the run folder
    settings_rules: ClassVar[dict[str, str | None]] = {"source": None, "reparse": "bool"}

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        if not settings.get("source"):
            raise AglError("replay backend: set `source` to a published result file")
        self._served: dict[str, dict[str, Any]] | None = None

    def prepare(self, clips: Sequence[Any], audio_root: Path | None) -> None:

        preds = import_published(self.settings["source"],
                                 reparse=bool(self.settings.get("reparse", False)))
        self._served = {p.sample_id: p.to_json() for p in preds}

    async def generate(self, request: Request) -> Reply:
        if self._served is None:
            self.prepare([], None)
        assert self._served is not None
        record = self._served.get(request.sample_id)
        if record is None:
            return Reply(ReplyStatus.FAILED,
                         error=f"no row for this clip in {self.settings['source']}")
        # The runner takes `prediction` as the finished record instead of parsing text.
        return Reply(ReplyStatus.OK, text=record.get("raw_reply"),
                     extra={"prediction": record})
