"""Inference backends: one module each, and this index of their names.

The interface is deliberately narrow (one async call, a request in, a reply out); see
`agl.backends.base` (the records are `agl.contracts.calls`). Each entry below is a small
factory that imports its backend's module when the name is first asked for
(`get_backend(name)`), as inspect_ai's provider index does: listing the names imports no
backend, so a backend imports its SDK at its top and a run that names `knn` never loads
google-genai, openai or torch. An unknown name answers with "did you mean ..." and the list.
A new backend: its module, a class with `name = "<name>"`, and three lines here.
"""

from agl.backends.base import Backend, available_backends, backend_entry, get_backend, register

__all__ = [
    "Backend",
    "available_backends",
    "get_backend",
    "register",
]

# --- the index: offline baselines, then the API backends, local models, and the wrappers ----


@backend_entry("knn")
def _knn() -> type[Backend]:
    from agl.backends.knn import NearestNeighbours

    return NearestNeighbours


@backend_entry("random")
def _random() -> type[Backend]:
    from agl.backends.baselines import UniformRandom

    return UniformRandom


@backend_entry("random-sphere")
def _random_sphere() -> type[Backend]:
    from agl.backends.baselines import SphereRandom

    return SphereRandom


@backend_entry("prior")
def _prior() -> type[Backend]:
    from agl.backends.baselines import CountryPrior

    return CountryPrior


@backend_entry("langprior")
def _langprior() -> type[Backend]:
    from agl.backends.langprior import LanguagePrior

    return LanguagePrior


@backend_entry("birdrange")
def _birdrange() -> type[Backend]:
    from agl.backends.birdrange import BirdRange

    return BirdRange


@backend_entry("replay")
def _replay() -> type[Backend]:
    from agl.backends.replay import Replay

    return Replay


@backend_entry("gemini")
def _gemini() -> type[Backend]:
    from agl.backends.gemini import Gemini  # google-genai

    return Gemini


@backend_entry("openai")
def _openai() -> type[Backend]:
    from agl.backends.openai_chat import OpenAIChat  # openai

    return OpenAIChat


@backend_entry("openai-compatible")
def _openai_compatible() -> type[Backend]:
    from agl.backends.openai_chat import OpenAICompatible  # openai

    return OpenAICompatible


@backend_entry("transformers")
def _transformers() -> type[Backend]:
    from agl.backends.local_transformers import LocalTransformers  # torch, transformers

    return LocalTransformers


@backend_entry("blind")
def _blind() -> type[Backend]:
    from agl.backends.blind import Blind

    return Blind


@backend_entry("cascade")
def _cascade() -> type[Backend]:
    from agl.backends.cascade import Cascade

    return Cascade
