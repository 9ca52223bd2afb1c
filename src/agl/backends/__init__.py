"""Inference backends. Each backend is one module here that registers itself by name.

The interface is deliberately narrow (one async call, a request in, a reply out); see
`agl.backends.base` (the records are `agl.contracts.calls`). `get_backend(name)` imports the
backend modules on first use, so naming an unknown backend answers with "did you mean ..."
and the list of names.
"""

from agl.backends.base import Backend, available_backends, get_backend, register

__all__ = [
    "Backend",
    "available_backends",
    "get_backend",
    "register",
]
