"""Temporary alias: agl's one decoder and resampler live in `agl.core.audio`.

Only `agl.backends.local_transformers` still imports from here: it is being split on another
branch (issue 22), so this branch leaves it untouched. Delete this file once that module
imports `agl.core.audio`; nothing else may import it.
"""

from agl.core.audio import clip_seconds, load_mono

__all__ = ["clip_seconds", "load_mono"]
