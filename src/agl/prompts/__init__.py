"""Prompts are named, versioned text files in this package; every run records a hash.

`load_prompt(name)` returns the exact text sent and its SHA-256. A file is never edited in
place once runs used it: a new wording is a new file (`geo-json-v2.txt`), so a run's prompt
hash always points at one text. `default` names the project's current prompt.

`agl1k-paper` is the AGL1K authors' own prompt. It is not stored here: it is read at run
time from the `question` field of one of their published result files (setting `source`: a
local path, an http(s)/file URL, or `paper:<name>`, one of their files by its short name, see
`agl.dataset.sources`; a URL is fetched once into `cache/sources/` and read offline after).
Their pipeline escaped newlines as the two characters `\\n` (and `\\r`, `\\t`) and doubled
every `"` when it wrote a CSV, and the published JSON kept both; `paper_prompt` undoes exactly
these two escapes to recover the text the authors sent to their models.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from agl.core.workspace import shared_path
from agl.dataset.sources import DEFAULT_CACHE, is_url, source_url
from agl.errors import AglError

DEFAULT = "geo-json-v1"
PAPER = "agl1k-paper"
ALIASES = {"default": DEFAULT}


@dataclass(frozen=True)
class Prompt:
    """A prompt's name, its exact text and where it came from; `sha256` identifies it in every
    record and run."""
    name: str
    text: str
    source: str  # the package file or published file it came from

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def available_prompts() -> list[str]:
    names = [p.name[:-4] for p in resources.files(__package__).iterdir() if p.name.endswith(".txt")]
    return sorted(names) + ["default", PAPER]


def load_prompt(name: str = "default", *, source: str | Path | None = None,
                sources: Any = None) -> Prompt:
    """The prompt `name`; `source` (a published result file) is needed for `agl1k-paper`.

    `sources` (an `agl.dataset.sources.SourceConfig`) says where `paper:<name>` points; by
    default params.yaml's `paper:` section in the working directory (a stage passes the keys
    it declared)."""
    name = ALIASES.get(name, name)
    if name == PAPER:
        if source is None:
            raise AglError(
                f"prompt '{PAPER}' is read from the authors' published results; give one of "
                "their result files as prompt_source (a path, a URL or paper:<name>, e.g. "
                "paper:qwen25-omni) in the model's entry, infer.prompt_source or --prompt-source"
            )
        return paper_prompt(source, sources)
    res = resources.files(__package__).joinpath(f"{name}.txt")
    if not res.is_file():
        raise AglError(f"unknown prompt '{name}'; known prompts: {', '.join(available_prompts())}")
    # Exact bytes: no strip, so the hash is the hash of the file.
    return Prompt(name=name, text=res.read_text(encoding="utf-8"), source=f"agl/prompts/{name}.txt")


def unescape_published(question: str) -> str:
    """Undo the authors' CSV escaping (see the module docstring)."""
    return (
        question.replace("\\n", "\n").replace("\\r", "\r").replace("\\t", "\t").replace('""', '"')
    )


def paper_prompt(source: str | Path, sources: Any = None) -> Prompt:
    records = _read_published(source, sources)
    # Each record's shape is checked: an object whose question is text (a null line, a list
    # or a number where the question belongs is not one).
    questions = {r["question"] for r in records if isinstance(r, dict) and isinstance(r.get("question"), str)}
    if not questions:
        raise AglError(f"{source}: no record has a 'question' field; pass an AGL1K result file")
    if len(questions) > 1:
        raise AglError(
            f"{source}: {len(questions)} different 'question' texts; pass a single-task file"
        )
    return Prompt(name=PAPER, text=unescape_published(questions.pop()), source=str(source))


def fetched_source(source: str | Path, sources: Any = None) -> tuple[str, Path | None]:
    """(where `source` is fetched from, the local copy or None when it is not fetched yet),
    without fetching: what a dry run reports. A local path is its own copy."""

    s = str(source)
    if not (s.startswith("paper:") or is_url(s)):
        return s, Path(s)
    url, cached = source_url(s, cache_dir=_sources_cache(), config=sources)
    return url, cached if cached.exists() else None


def _sources_cache() -> Path:
    # A queued experiment shares the repository's cache/sources/ (agl.core.workspace).

    return shared_path(DEFAULT_CACHE)


def _read_published(source: str | Path, sources: Any = None) -> list[dict]:
    s = str(source)
    from agl.dataset.sources import is_url, resolve_source  # the data phase: only for the paper's prompt

    if s.startswith("paper:") or is_url(s):
        # Fetched once into cache/sources/ (checked against a pinned SHA-256 where there is
        # one), then read offline.
        path = resolve_source(s, cache_dir=_sources_cache(), config=sources)
    else:
        path = Path(s)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AglError(f"{s}: published results file not found") from None
    except UnicodeDecodeError as exc:
        raise AglError(f"{s}: not UTF-8 text (byte {exc.start}: {exc.reason}); pass an AGL1K "
                       "result file as published (UTF-8 JSON)") from None
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except (json.JSONDecodeError, RecursionError):
        pass
    try:  # JSON Lines (the authors' seed_42_ABCD.jsonl files)
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (json.JSONDecodeError, RecursionError) as exc:
        raise AglError(f"{s}: neither JSON nor JSON Lines ({str(exc)[:120]})") from None


# The answer the default prompt asks for, as a JSON schema: backends that can constrain
# decoding (Gemini `response_json_schema`, OpenAI `response_format`) use it when the model's
# settings say `json_schema: true`.
ANSWER_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "city": {"type": "string"},
        "country": {"type": "string"},
        "continent": {"type": "string"},
        "latitude": {"type": "number", "minimum": -90, "maximum": 90},
        "longitude": {"type": "number", "minimum": -180, "maximum": 180},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["reasoning", "city", "country", "continent", "latitude", "longitude",
                 "confidence"],
    "additionalProperties": False,
}
