"""The providers' batch APIs, one module each (`openai`, `gemini`), and their index.

Each entry is a small factory that imports its provider's module (and so its SDK) when a
backend's name is first asked for (`provider_class`), as `agl.backends` indexes backends.
"""

from agl.core.registry import Registry
from agl.inference.batch.provider import BatchProvider

_PROVIDERS: Registry[type[BatchProvider]] = Registry("batch provider")


def provider_class(backend_name: str) -> type[BatchProvider]:
    """The batch provider for a backend, or an AglError naming those there are."""
    return _PROVIDERS.get(backend_name, missing=f"no batch provider for backend '{backend_name}'")


@_PROVIDERS.lazy("gemini")
def _gemini() -> type[BatchProvider]:
    from agl.inference.batch.providers.gemini import GeminiBatch  # google-genai

    return GeminiBatch


@_PROVIDERS.lazy("openai")
def _openai() -> type[BatchProvider]:
    from agl.inference.batch.providers.openai import OpenAIBatch  # openai

    return OpenAIBatch
