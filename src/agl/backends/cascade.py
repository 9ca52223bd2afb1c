"""`cascade`: perception by this project's own models, then a text-only LLM.

Stage one is what the curation stages already heard in each clip (agl.backends._perception:
Whisper's language with its probability and, with `speech.transcribe: true`, the transcript;
BirdNET's species with confidences; the tagger's AudioSet categories; the duration), read from
their tracked tables: no second listen. Stage two is a text backend (`text_backend`: openai,
openai-compatible or gemini) given a prompt that carries that report and nothing else: no
audio, no key, file name, title, description or metadata tag. It separates what a model
hears from what it knows: the AudioBench cascade (Whisper + Llama-3) and openai/evals'
WhisperCascadedSolver are the same idea.

Settings (params.yaml `models: <name>: settings:`):

  text_backend: openai     openai | openai-compatible | gemini: the model that reads the report
  perception: build/curation   the curation folder the report is read from
  max_transcript_chars: 2000   a longer transcript is cut (the prompt stays bounded)
  ...                      every other key is the text backend's own (temperature, base_url,
                           api_key_env, thinking_budget, ...)

The run's prompt must hold the slot `{perception}` (prompt `cascade-v1`); the report is put
there before the reply cache is asked (`Backend.compose`), so the cache key covers it, and the
run's fingerprint covers the tables' bytes (`inputs_digest`): records made from other tables
are asked again. Each prediction keeps the report it was given under `meta.perception`.
Which Whisper heard the speech is params.yaml `speech.model` (the speech stage's), named in
the report.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from agl.backends import _perception
from agl.backends.base import Backend, Wrapper, get_backend
from agl.contracts.calls import Reply, Request
from agl.core.checks import number_setting
from agl.errors import AglError

TEXT_BACKENDS = ("openai", "openai-compatible", "gemini")
SLOT = "{perception}"
DEFAULT_FOLDER = "build/curation"
# What a cascade entry with the default folder reads: the infer stage declares each as a dep
# (tests/test_stage_deps.py), so a changed curation table re-runs the runs built on it.
BUILD_INPUTS = tuple(f"{DEFAULT_FOLDER}/{name}" for name in (*_perception.REQUIRED, *_perception.OPTIONAL))


def text_class(settings: dict[str, Any]) -> type[Backend]:
    name = settings.get("text_backend")
    if name not in TEXT_BACKENDS:
        raise AglError(f"cascade backend: text_backend {name!r} is not one of "
                       f"{', '.join(TEXT_BACKENDS)}")
    return get_backend(name)


class Cascade(Wrapper):
    name = "cascade"  # its entry in the index (agl.backends)
    example_model = "gpt-4.1"
    # Its stage one is the curation tables of the original clips: in a listen@ stage it would
    # describe the clip before the intervention (keys are kept), so listen refuses it.
    perceives_from_tables = True
    settings_rules: ClassVar[dict[str, str | None]] = {
        "text_backend": None, "perception": None, "max_transcript_chars": "count"}

    @classmethod
    def inner_class(cls, settings: dict[str, Any]) -> type[Backend]:
        return text_class(settings)

    @classmethod
    def inputs_digest(cls, settings: dict[str, Any]) -> str | None:
        return _perception.digest(settings.get("perception") or DEFAULT_FOLDER)

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        self.folder = str(settings.get("perception") or DEFAULT_FOLDER)
        self.max_chars = int(number_setting(settings, "max_transcript_chars", 2000, "count",
                                            "cascade setting"))
        self._tables: _perception.Perception | None = None
        self._reports: dict[str, dict[str, Any]] = {}
        self._seconds: dict[str, Any] = {}  # the manifest's durations (`prepare`), by clip

    def prepare(self, clips: Any, audio_root: Any) -> None:
        # A shard (agl.inference.shards) composes nothing: it reads each report again, and
        # needs the duration the driver's `compose` had from the clip (the same report bytes).
        self._seconds = {c.key: getattr(c, "seconds", None) for c in clips}

    def compose(self, request: Request, clip: Any) -> Request:
        if SLOT not in request.prompt:
            raise AglError(f"cascade backend: the run's prompt has no {SLOT} slot for the "
                           "perception report; use prompt: cascade-v1")
        if self._tables is None:
            self._tables = _perception.load(self.folder, self.max_chars)
        report = self._tables.report(clip.key, getattr(clip, "seconds", None))
        self._reports[request.sample_id] = report
        return replace(request, prompt=request.prompt.replace(SLOT, _perception.render(report)),
                       audio_path=None, audio_sha256=None)

    async def generate(self, request: Request) -> Reply:
        reply = await self.ask(request)
        report = self._reports.get(request.sample_id)
        if report is None:  # composed in another process (a cluster shard): read again
            if self._tables is None:
                self._tables = _perception.load(self.folder, self.max_chars)
            report = self._tables.report(request.sample_id, self._seconds.get(request.sample_id))
        return replace(reply, extra={**reply.extra, "perception": report})
