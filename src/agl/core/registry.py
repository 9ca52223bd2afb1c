"""Names to classes: an index of small lazy factories (inspect_ai's provider registry).

A backend, an executor and a batch provider are each one file; their package's index lists
every name with a factory of three lines that imports the file and returns its class:

    @_BACKENDS.lazy("gemini")
    def _gemini() -> type[Backend]:
        from agl.backends.gemini import GeminiBackend  # imports google-genai

        return GeminiBackend

Listing the names imports nothing, so a backend's file imports its SDK at its top (a run that
names `knn` never imports google-genai, and `agl --help` loads no SDK), and the index is the
one place a reader finds every name. A name is claimed once: a second entry under it is
refused. An unknown name is refused in one line that suggests the closest name and lists the
names there are.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Generic, TypeVar

from agl.errors import AglError

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    """The index of one kind of part: name -> factory, and the classes loaded so far."""

    def __init__(self, kind: str):
        self.kind = kind
        self._factories: dict[str, Callable[[], T]] = {}
        self._classes: dict[str, T] = {}

    def lazy(self, name: str) -> Callable[[Callable[[], T]], Callable[[], T]]:
        """Decorator for an index entry: `factory()` imports the part's module and returns
        its class. A second entry under a taken name is refused: two parts would claim it."""

        def deco(factory: Callable[[], T]) -> Callable[[], T]:
            held = self._factories.get(name)
            if held is not None and held is not factory:
                raise ValueError(f"{self.kind} name '{name}' is already registered by {held.__qualname__}")
            self._factories[name] = factory
            return factory

        return deco

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator for a part defined where it is registered (a test's own backend):
        the same index entry, its factory returning the class at hand; sets `cls.name`."""

        def deco(cls: T) -> T:
            held = self._classes.get(name)
            if held is not None and held is not cls:
                raise ValueError(f"{self.kind} name '{name}' is already registered by {held}")
            if held is None and name in self._factories:
                raise ValueError(f"{self.kind} name '{name}' is already in the index")
            cls.name = name
            self._classes[name] = cls
            self._factories[name] = lambda: cls
            return cls

        return deco

    def names(self) -> list[str]:
        """Every name in the index, sorted (imports nothing)."""
        return sorted(self._factories)

    def get(self, name: str, missing: str | None = None) -> T:
        """The class under `name` (its module imported on the first ask), or an AglError:
        `missing` (default "unknown <kind> '<name>'"), the closest name, and the names."""
        if name in self._classes:
            return self._classes[name]
        if name not in self._factories:
            close = difflib.get_close_matches(name, list(self._factories), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise AglError(f"{missing or f'unknown {self.kind} {name!r}'}; {hint}known "
                           f"{self.kind}s: {', '.join(self.names())}")
        cls = self._factories[name]()
        # The class says its own name (its messages use it before any lookup); the index and
        # the class must agree, or a run would record another name than the one asked for.
        if getattr(cls, "name", name) != name:
            raise ValueError(f"{self.kind} index entry '{name}' returns {cls.__qualname__}, "
                             f"whose name is '{cls.name}'")
        self._classes[name] = cls
        return cls
