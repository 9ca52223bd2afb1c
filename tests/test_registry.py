"""One registry for the parts that register themselves (backends, executors, batch providers)."""

from __future__ import annotations

import pytest

from agl.backends.base import get_backend
from agl.core.registry import Registry
from agl.errors import AglError
from agl.inference.batch.provider import provider_class
from agl.inference.executors import available_executors, get_executor


def test_each_part_is_found_by_name_and_an_unknown_name_gets_the_closest_and_the_list():
    assert get_backend("knn").name == "knn"
    assert {"local", "batch", "ray"} <= set(available_executors())
    assert provider_class("gemini").name == "gemini"
    with pytest.raises(AglError) as exc:
        get_executor("rya")
    assert str(exc.value) == ("unknown executor 'rya'; did you mean 'ray'? known executors: "
                              + ", ".join(sorted(available_executors())))
    with pytest.raises(AglError, match=r"^no batch provider for backend 'knn'; known batch "
                                       r"providers: gemini, openai$"):
        provider_class("knn")


def test_a_second_class_under_a_taken_name_is_refused_and_the_same_class_is_not():
    reg: Registry[type] = Registry("widget", "agl.inference.executors")

    @reg.register("a")
    class A:
        pass

    assert reg.register("a")(A) is A and A.name == "a"  # a module imported twice
    with pytest.raises(ValueError, match="widget name 'a' is already registered"):
        reg.register("a")(type("B", (), {}))


def test_modules_are_imported_on_the_first_unknown_name_only(monkeypatch):
    reg: Registry[type] = Registry("widget", "agl.inference.executors")
    loads = []
    monkeypatch.setattr(reg, "_load_all", lambda: loads.append(1))
    reg.register("held")(type("W", (), {}))
    assert reg.get("held").name == "held" and loads == []
    with pytest.raises(AglError, match="unknown widget 'other'; known widgets: held"):
        reg.get("other")
    assert loads == [1]
