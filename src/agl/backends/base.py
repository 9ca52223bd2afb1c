"""The backend interface and its registry.

A backend answers one request at a time with `async generate(request) -> Reply`. Retries,
concurrency, caching and resume live in the runner (`agl.inference.runner`), not in backends, so a
new backend is one small file: a class that says its `name`, and a three-line entry in the
index (`agl/backends/__init__.py`).

Failures are statuses, never values: a call that failed returns `Reply(status=FAILED,
error=...)` or raises `BackendError` (retryable or not); it never returns made-up text.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from agl.contracts.calls import Reply, Request
from agl.core.checks import check_value
from agl.core.container import ContainerError, strip
from agl.core.registry import Registry
from agl.core.retry import MAX_BATCH_BYTES, MAX_REPLY_BYTES
from agl.errors import AglError, reject_unknown_keys


class BackendError(Exception):
    """A failed call. `retryable` for 429/5xx/timeouts; `retry_after` in seconds if given;
    `gone` when the provider says the model itself no longer exists (retired, renamed): the
    runner stops the whole run on it rather than failing every clip the same way."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None,
                 gone: bool = False):
        super().__init__(message)
        self.retryable = retryable and not gone
        self.retry_after = retry_after
        self.gone = gone


class Backend(abc.ABC):
    """Base class. Subclasses set `name` (their entry in the index) and implement `generate`."""

    name: ClassVar[str] = ""
    # The model a run gets when none is named (`agl infer --backend NAME` without --model, a
    # params.yaml entry without `model:`): the one default of every entrance. A backend whose
    # params.yaml `models:` entry names a model sets it to that (tests/test_backend_defaults.py
    # holds them equal); "" where no model can be assumed (an API or local model: the
    # backend then asks for one in one line).
    default_model: ClassVar[str] = ""
    # For a backend with no default: a model to name in the one line that asks for one.
    example_model: ClassVar[str] = ""
    # Whether the same request always gets the same reply (greedy decoding, temperature 0,
    # or a seeded baseline): only deterministic successful replies are cached.
    deterministic: bool = False
    # Whether requests carry audio (baselines that guess without listening set False, so
    # the runner neither hashes nor requires the audio files).
    needs_audio: bool = True
    # Whether what the backend perceives of a clip is read from tables computed beforehand on
    # the dataset's own clips (the cascade's curation tables), by clip key, not from the audio
    # it is sent: an intervention on the audio cannot reach it, so listen@ refuses it
    # (agl.inference.runspec.check_listens; docs/counterfactual.md).
    perceives_from_tables: ClassVar[bool] = False
    # Whether the answer for one clip depends on the other clips of the dataset (knn's
    # neighbours, prior's label counts): its records are kept across reruns only while the
    # whole dataset is unchanged (agl.inference.freshness).
    reads_dataset: bool = False
    # Whether answers are computed offline at no cost (knn, the country prior, a replayed
    # file): a rerun computes every clip again instead of keeping the run folder's records,
    # so a record edited after the run never survives (agl.inference.model_run._rederive).
    recompute: bool = False
    # The environment variables an API backend reads its key from (`api_key_env` overrides),
    # and whether it refuses to start without one: `agl infer --dry-run` names an unset key.
    default_key_envs: tuple[str, ...] = ()
    key_required: bool = False
    # Whether the first request of a run goes alone: a served API model can be retired
    # (agl.errors.ModelGone after one request, not after a full batch of them); a local model
    # cannot, and its first batch stays whole.
    probe_first: bool = False
    # Whether requests go to a server over HTTP (through agl.http.transport): an attempt
    # whose request never left this machine (a timeout while connecting or building it, at
    # load) is then recorded as never sent, and not counted as a request (agl.inference.runner).
    over_http: bool = False
    # Whether the backend loads a model into its own process (transformers): a cluster
    # executor keeps it in a long-lived actor instead of building it per shard.
    loads_model: bool = False
    # Whether a request may carry several windows of one file as audio parts of one prompt
    # (`Request.parts`: long_audio mode multi_part: the transformers backend's audio entries,
    # the APIs' several input_audio / inline parts); a backend that sends one file refuses it.
    multi_part: bool = False
    # Audio tokens per second of audio as the provider counts them in its usage (Gemini: 32):
    # what turns a reply's `audio_tokens` into the seconds the provider says it heard
    # (agl.inference.record.heard_reported); None: the provider counts none. The model
    # setting `audio_tokens_per_s` overrides it.
    audio_tokens_per_s: ClassVar[float | None] = None
    # The largest reply body an HTTP backend reads, and the largest batch status or result
    # file (agl.backends.service.client_args caps them while they stream); the runner sets
    # them from params.yaml infer.max_reply_bytes / max_batch_bytes.
    max_reply_bytes: int = MAX_REPLY_BYTES
    max_batch_bytes: int = MAX_BATCH_BYTES
    # The keys a model entry's `settings:` may hold for this backend, each with the rule its
    # value meets (a name of agl.core.checks.RULES) or None (text, lists, mappings: checked
    # where they are read). Declared beside `name`; any other key is refused with "did
    # you mean" (`check_settings`): `temprature: 0` used to run at the default temperature.
    settings_rules: ClassVar[dict[str, str | None]] = {}

    @classmethod
    def wrapped_class(cls, settings: dict[str, Any]) -> type[Backend] | None:
        """The backend a wrapper (blind, cascade) passes its other settings to; None here."""
        return None

    @classmethod
    def check_settings(cls, settings: dict[str, Any], where: str, *, values: bool = True) -> None:
        """Refuse a settings key this backend does not read, and (`values`) a setting that
        breaks its rule; `where` names the entry (`models.knn.settings (knn backend)`). The
        run driver checks both before any work; a backend built directly checks the keys,
        and its values where it reads them (with their defaults as examples)."""
        known = {**COMMON_SETTINGS, **cls.settings_rules}
        inner = cls.wrapped_class(settings)
        if inner is not None:  # a wrapper: its own keys here, every other one is the inner's
            inner.check_settings({k: v for k, v in settings.items() if k not in cls.settings_rules},
                                 where, values=values)
            settings = {k: v for k, v in settings.items() if k in cls.settings_rules}
        reject_unknown_keys(settings, set(known), where)
        for key, rule in known.items() if values else ():
            if rule is not None and settings.get(key) is not None:
                check_value(key, settings[key], f"{where}:", rule=rule)

    @classmethod
    def unset_key_envs(cls, settings: dict[str, Any]) -> tuple[str, ...]:
        """The variables to set when this backend would refuse to start for lack of a key
        (empty: a key is set, or none is needed)."""
        import os

        envs = (str(settings["api_key_env"]),) if settings.get("api_key_env") else cls.default_key_envs
        needed = cls.key_required or bool(settings.get("api_key_env"))
        return envs if needed and not any(os.environ.get(e) for e in envs) else ()

    @classmethod
    def inputs_digest(cls, settings: dict[str, Any]) -> str | None:
        """A digest of files besides the audio and the manifest that this backend's answers
        stand on (the cascade's perception tables), folded into the run's fingerprint so that
        records made from other files are asked again; None: none."""
        return None

    def __init__(self, model: str = "", **settings: Any):
        self.check_settings(settings, f"{self.name} settings", values=False)
        self.model = model or self.default_model
        self.settings = settings

    def require_model(self) -> None:
        """One line asking for a model where none was named and none can be assumed (an API's
        or a local checkpoint's): never a request for the model ''."""
        if not self.model:
            raise AglError(f"{self.name} backend: name the model with --model (e.g. --model "
                           f"{self.example_model}) or `model:` in its params.yaml entry")

    def prepare(self, clips: Sequence[Any], audio_root: Path | None) -> None:
        """Called once by the runner before a run with the whole manifest (a list of
        `agl.dataset.manifest.Clip`). Baselines that learn from or summarise the manifest use it;
        the default does nothing."""
        return None

    def compose(self, request: Request, clip: Any) -> Request:
        """The request this backend sends for `clip` (an `agl.dataset.manifest.Clip`), built
        before the reply cache is asked: a backend that puts per-clip text into its prompt
        (the blind baseline's title, the cascade's perception report) does it here, so the
        cache key covers exactly what is sent. The default sends the request as built."""
        return request

    @abc.abstractmethod
    async def generate(self, request: Request) -> Reply:
        """Answer one request; a failed call returns status FAILED or raises BackendError."""

    async def aclose(self) -> None:
        """Release clients or models; the default has nothing to release."""
        return None


class Wrapper(Backend):
    """A backend that asks another one without the audio (`blind`, `cascade`): its own
    settings are its `settings_rules` keys, every other one goes to the wrapped backend, which
    it stands for (model, caching, keys, probing) and which sends each request without a file.
    A subclass names the wrapped class (`inner_class`), may refuse it (`check_inner`), and
    writes its prompt in `compose`."""

    needs_audio = False

    @classmethod
    @abc.abstractmethod
    def inner_class(cls, settings: dict[str, Any]) -> type[Backend]:
        """The wrapped backend's class, from this wrapper's settings (or one line)."""

    @classmethod
    def passed(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The settings the wrapped backend gets: all but this wrapper's own."""
        return {k: v for k, v in settings.items() if k not in cls.settings_rules}

    @classmethod
    def wrapped_class(cls, settings: dict[str, Any]) -> type[Backend]:
        return cls.inner_class(settings)

    @classmethod
    def unset_key_envs(cls, settings: dict[str, Any]) -> tuple[str, ...]:
        return cls.inner_class(settings).unset_key_envs(cls.passed(settings))

    def check_inner(self, inner: type[Backend]) -> None:
        """Refuse a wrapped backend this wrapper cannot use; the default takes any."""
        return None

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        inner = self.inner_class(settings)
        self.check_inner(inner)
        self.inner = inner(model, **self.passed(settings))
        self.model = self.inner.model
        self.deterministic = self.inner.deterministic
        self.probe_first = inner.probe_first
        self.over_http = inner.over_http
        self.default_key_envs = inner.default_key_envs

    async def ask(self, request: Request) -> Reply:
        """The wrapped backend's reply to `request`, sent without a file whatever the runner
        built, under this run's reply caps."""
        self.inner.max_reply_bytes = self.max_reply_bytes
        self.inner.max_batch_bytes = self.max_batch_bytes
        return await self.inner.generate(replace(request, audio_path=None, audio_sha256=None))

    async def aclose(self) -> None:
        await self.inner.aclose()


# Read by the run driver for every backend: `mode` (sync or batch: agl.inference.batch says
# which backends have a batch API).
COMMON_SETTINGS: dict[str, str | None] = {"mode": None}
# The settings of a backend that sends a chat request (system turn, batch options, caching,
# and the dry run's cost estimate: agl.inference.estimate).
SERVICE_SETTINGS: dict[str, str | None] = {
    "system_prompt": None, "batch": None, "cache": "bool", "api_key_env": None,
    "base_url": None, "json_schema": "bool", "audio_tokens_per_s": "nonnegative",
    "est_output_tokens": "count0"}

# --- what leaves the process: the sound, never the file's tags or name ---------------------


def sent_audio(request: Request) -> bytes:
    """The bytes of `request`'s audio as every backend sends them (inline, uploaded, in a
    batch file): the file without its container metadata (agl.core.container.strip: ID3v1/v2,
    APEv2, Lyrics3, RIFF INFO, FLAC and Vorbis comments; an MP3's frames byte-identical),
    or the file as published where `request.tags` (the paper protocol, the `tags`
    intervention). A container whose tags cannot be removed without re-encoding is a
    failure for that clip, never sent with its tags."""
    path = Path(request.audio_path)  # type: ignore[arg-type]
    data = path.read_bytes()
    if request.tags:
        return data
    try:
        return strip(data, path.suffix)
    except ContainerError as exc:
        raise BackendError(f"clip {request.sample_id}: {exc}", retryable=False) from None


async def sent_audio_async(request: Request) -> bytes:
    """`sent_audio`, read in a thread for a file of 1 MiB or more (a thread hop costs more
    than reading a small file)."""
    import asyncio

    if Path(request.audio_path).stat().st_size < 1 << 20:  # type: ignore[arg-type]
        return sent_audio(request)
    return await asyncio.to_thread(sent_audio, request)


async def part_audio(request: Request) -> list[bytes]:
    """A `multi_part` request's parts (`Request.parts`: windows of its file, long_audio
    mode multi_part) as WAV bytes, one per part, cut as a window is cut
    (agl.core.audio.cut_wavs: 16-bit PCM, no tags, the same bytes on every machine)."""
    import asyncio

    from agl.core.audio import cut_wavs  # numpy: only where a request's parts are cut

    try:
        return await asyncio.to_thread(cut_wavs, Path(request.audio_path), request.parts)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - soundfile raises several kinds
        raise BackendError(f"clip {request.sample_id}: cannot cut its parts ({type(exc).__name__}: "
                           f"{exc})", retryable=False) from None


def opaque_name(data: bytes) -> str:
    """A name for an upload that says nothing of the clip (its file name can hold the city:
    `PrestonStation.mp3`): `audio-` and the first 16 hex digits of the bytes' SHA-256."""
    import hashlib

    return "audio-" + hashlib.sha256(data).hexdigest()[:16]


# The index of backends: its entries are in agl/backends/__init__.py, which Python runs before
# this module can be imported, so the index is full before the first lookup.
_BACKENDS: Registry[type[Backend]] = Registry("backend")
backend_entry = _BACKENDS.lazy  # decorator for an index entry (a factory importing its module)
register = _BACKENDS.register  # class decorator for a backend defined where it is used (tests)


def available_backends() -> list[str]:
    return _BACKENDS.names()


def model_or_default(backend: str, model: str | None) -> str:
    """`model`, or the backend's `default_model` when none is named: what every entrance
    (the command line, a params.yaml entry, a stage) runs."""
    return model or get_backend(backend).default_model


def get_backend(name: str) -> type[Backend]:
    """The backend class registered under `name`, or an AglError that suggests names."""
    return _BACKENDS.get(name)
