"""Names to classes, filled by the modules of one package as they are imported.

A backend, an executor and a batch provider are each one file that registers itself with a
class decorator. The registry imports its package's modules only on the first lookup of a
name it does not hold yet (a run that names `knn` never imports the transformers backend's
module), and an unknown name is refused in one line that suggests the closest name and lists
the names there are.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from typing import Generic, TypeVar

from agl.errors import AglError

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    """The classes registered under their names by the modules of `package` (its modules
    whose names start with `_`, and those in `skip`, are not searched)."""

    def __init__(self, kind: str, package: str, skip: frozenset[str] = frozenset()):
        self.kind = kind
        self.package = package
        self._skip = skip
        self._classes: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator: make `cls` available under `name` (and set `cls.name`).
        A second class under the same name is refused: two files would claim one name."""

        def deco(cls: T) -> T:
            held = self._classes.get(name)
            if held is not None and held is not cls:
                raise ValueError(f"{self.kind} name '{name}' is already registered by {held}")
            cls.name = name
            self._classes[name] = cls
            return cls

        return deco

    def _load_all(self) -> None:
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_") and info.name not in self._skip:
                importlib.import_module(f"{self.package}.{info.name}")

    def names(self) -> list[str]:
        """Every registered name, sorted (imports every module of the package)."""
        self._load_all()
        return sorted(self._classes)

    def get(self, name: str, missing: str | None = None) -> T:
        """The class registered under `name`, or an AglError: `missing` (default "unknown
        <kind> '<name>'"), the closest name, and the names there are."""
        if name not in self._classes:
            self._load_all()
        if name not in self._classes:
            close = difflib.get_close_matches(name, list(self._classes), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise AglError(f"{missing or f'unknown {self.kind} {name!r}'}; {hint}known "
                           f"{self.kind}s: {', '.join(sorted(self._classes))}")
        return self._classes[name]
