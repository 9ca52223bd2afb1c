"""One registry for the parts that register themselves (backends, executors, batch providers):
an index of lazy factories, each importing its module when its name is asked for."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from agl.backends.base import get_backend
from agl.core.registry import Registry
from agl.errors import AglError
from agl.inference.batch.providers import provider_class
from agl.inference.executors import available_executors, get_executor

SRC = Path(__file__).resolve().parents[1] / "src"


def test_each_part_is_found_by_name_and_an_unknown_name_gets_the_closest_and_the_list():
    assert get_backend("knn").name == "knn"
    assert {"local", "batch", "ray"} <= set(available_executors())
    with pytest.raises(AglError) as exc:
        get_executor("rya")
    assert str(exc.value) == ("unknown executor 'rya'; did you mean 'ray'? known executors: "
                              + ", ".join(sorted(available_executors())))
    with pytest.raises(AglError, match=r"^no batch provider for backend 'knn'; known batch "
                                       r"providers: gemini, openai$"):
        provider_class("knn")


def _entries(index: Path):
    """(name, module, class) of every `@<registry>.<entry>("name")` factory in an index file."""
    for fn in ast.parse(index.read_text(encoding="utf-8")).body:
        if isinstance(fn, ast.FunctionDef) and fn.decorator_list:
            deco = fn.decorator_list[0]
            imp = next(n for n in fn.body if isinstance(n, ast.ImportFrom))
            yield deco.args[0].value, imp.module, imp.names[0].name


def _class_name(module: str, cls: str) -> str | None:
    tree = ast.parse((SRC / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and [getattr(x, "id", "") for x in stmt.targets] == ["name"]:
            return stmt.value.value
    return None


@pytest.mark.parametrize("index", ["agl/backends/__init__.py", "agl/inference/executors/__init__.py",
                                   "agl/inference/batch/providers/__init__.py", "agl/executor/__init__.py"])
def test_every_entry_of_an_index_names_a_class_of_its_own_name(index):
    """Read, not imported (the transformers entry would load torch): each factory's class says
    the name it is indexed under, and every module of the package is indexed."""
    entries = list(_entries(SRC / index))
    assert entries and all(_class_name(module, cls) == name for name, module, cls in entries), entries
    package = index.removesuffix("/__init__.py").replace("/", ".")
    indexed = {module for _, module, _ in entries}
    parts = {f"{package}.{p.stem}" for p in (SRC / index).parent.glob("[!_]*.py")}
    helpers = {"agl.backends.base", "agl.backends.service", "agl.backends.endpoints",
               "agl.executor.config", "agl.executor.ray_connect", "agl.executor.ray_leftovers",
               "agl.executor.shards"}
    assert parts - helpers == indexed


def test_a_second_entry_under_a_taken_name_is_refused_and_a_name_must_match_its_class():
    reg: Registry[type] = Registry("widget")

    @reg.register("a")
    class A:
        pass

    assert reg.register("a")(A) is A and A.name == "a"  # a module imported twice
    with pytest.raises(ValueError, match="widget name 'a' is already registered"):
        reg.register("a")(type("B", (), {}))
    with pytest.raises(ValueError, match="widget name 'a' is already registered"):
        reg.lazy("a")(lambda: A)
    reg.lazy("c")(lambda: type("C", (), {"name": "see"}))
    with pytest.raises(ValueError, match="widget index entry 'c' returns C, whose name is 'see'"):
        reg.get("c")


def test_a_factory_runs_on_the_first_ask_only_and_listing_runs_none():
    reg: Registry[type] = Registry("widget")
    calls = []
    W = type("W", (), {"name": "w"})
    reg.lazy("w")(lambda: calls.append(1) or W)
    assert reg.names() == ["w"] and calls == []
    assert reg.get("w") is W and reg.get("w") is W and calls == [1]
    with pytest.raises(AglError, match="unknown widget 'x'; known widgets: w"):
        reg.get("x")


def test_listing_the_names_imports_no_backend_and_no_sdk():
    """The index lets a backend import its SDK at its top: listing names loads none of them."""
    code = ("import sys; from agl.backends import available_backends; "
            "from agl.inference.executors import available_executors; "
            "available_backends(); available_executors(); "
            "print(sorted(m for m in sys.modules if m.startswith(('agl.backends.', 'google.genai', "
            "'openai', 'torch', 'transformers', 'agl.inference.executors.')) and m != 'agl.backends.base'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
