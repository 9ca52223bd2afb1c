"""`blind`: any backend asked the same question without the recording.

What a model answers with no audio is its prior (where field recordings tend to come from,
for that model); what it answers from the clip's title alone is what the metadata tells. A
leak or contamination check that has no such baseline mostly measures a recording's style
(arXiv 2603.28378), and a score is only "from the sound" by its distance to these rows.

Settings (params.yaml `models: <name>: settings:`):

  of: gemini               the backend asked (any registered one but `blind` itself)
  inputs: none | title     none: the run's prompt alone; title: the prompt and one line with
                           the manifest's `title` of the clip, nothing else of the metadata
  ...                      every other key is the wrapped backend's own (base_url,
                           temperature, api_key_env, ...)

No request carries audio (`needs_audio` False: the runner neither hashes nor reads a clip),
and the title goes into the request's prompt before the reply cache is asked
(`Backend.compose`), so the cache key covers the title sent. Runs of this backend are marked
on the leaderboard as hearing nothing (agl.scoring.marks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from agl.backends.base import Backend, Wrapper, get_backend
from agl.contracts.calls import Reply, Request
from agl.errors import AglError

INPUTS = ("none", "title")
# How the title reaches the model: one labelled line after the prompt.
TITLE_LINE = "\n\nThe recording's title, as its uploader gave it: {title}"


def inner_class(settings: dict[str, Any], name: str) -> type[Backend]:
    """The wrapped backend's class from the `of` setting, or one line saying what to set."""
    of = settings.get("of")
    if not isinstance(of, str) or not of:
        raise AglError(f"{name} backend: set `of`, the backend to ask (e.g. of: gemini)")
    if of in ("blind", "cascade"):
        raise AglError(f"{name} backend: of: {of} wraps a wrapper; name the model's own backend")
    return get_backend(of)


class Blind(Wrapper):
    name = "blind"  # its entry in the index (agl.backends)
    example_model = "gemini-2.5-flash"
    settings_rules: ClassVar[dict[str, str | None]] = {"of": None, "inputs": None}

    @classmethod
    def inner_class(cls, settings: dict[str, Any]) -> type[Backend]:
        return inner_class(settings, cls.name)

    def check_inner(self, inner: type[Backend]) -> None:
        inputs = self.settings.get("inputs", "none")
        if inputs not in INPUTS:
            raise AglError(f"blind backend: inputs {inputs!r} is not one of {', '.join(INPUTS)}")
        self.inputs = inputs
        if inner.reads_dataset or not inner.needs_audio:
            raise AglError(f"blind backend: of: {inner.name} does not listen to begin with; "
                           "wrap a model that takes audio")

    def compose(self, request: Request, clip: Any) -> Request:
        prompt = request.prompt
        if self.inputs == "title":
            title = " ".join(str(getattr(clip, "title", "") or "").split())
            if not title:
                raise AglError(f"blind backend (inputs: title): clip {clip.key} has no title in "
                               "the manifest; use inputs: none, or a manifest with titles")
            prompt += TITLE_LINE.format(title=title)
        return replace(request, prompt=prompt, audio_path=None, audio_sha256=None)

    async def generate(self, request: Request) -> Reply:
        reply = await self.ask(request)  # whatever the runner built, no file is sent
        return replace(reply, extra={**reply.extra, "inputs": self.inputs})
