"""The shape of src/agl: phase packages, small modules, no import cycles, honest imports.

* `src/agl/` holds packages plus `cli.py`, `errors.py` and `__init__.py`;
* no module is over 450 lines;
* the import graph (every `import agl...`, at any depth) has no cycle;
* an agl module imported inside a function says why on that line or the line above (a heavy
  or optional dependency: torch, transformers, mlflow, tflite; or a command's lazy load);
* a public function that another package calls has a docstring;
* a command module (`agl.commands.*`) imports its work in one block, in one function.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from stage_closure import AGL, SRC, module_file

MAX_LINES = 450
TOP_LEVEL_FILES = {"__init__.py", "cli.py", "errors.py"}


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(AGL.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def agl_imports(name: str, path: Path) -> list[tuple[str, ast.stmt, bool]]:
    """(imported agl module, the statement, inside a function?) for every import in a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend((a.name, child, nested) for a in child.names if a.name.startswith("agl."))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = _package(name, path).split(".")[: len(_package(name, path).split(".")) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod == "agl" or mod.startswith("agl."):
                    for a in child.names:
                        sub = f"{mod}.{a.name}"
                        found.append((sub if module_file(sub) else mod, child, nested))
            visit(child, inner)

    visit(tree, False)
    return [(m, s, n) for m, s, n in found if m != "agl"]


def test_top_level_holds_packages_and_three_files():
    loose = sorted(p.name for p in AGL.glob("*.py") if p.name not in TOP_LEVEL_FILES)
    assert loose == [], f"modules beside the packages in src/agl: {loose}"


def test_no_module_over_the_limit():
    long = {str(p.relative_to(SRC)): n for p in modules().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def import_cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    mods = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for target, _, _ in agl_imports(name, path):
            while target not in mods and "." in target:
                target = target.rsplit(".", 1)[0]
            if target != name and target in mods and not name.startswith(target + "."):
                graph[name].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(mods):
        if v not in index:
            strong(v)
    return out


def test_no_import_cycles():
    assert import_cycles() == []


def _index_factory_lines(path: Path) -> set[int]:
    """Lines of the imports that open a registry index's factory (`@..._entry(...)` or
    `@....lazy(...)`): such a function exists to import its module when its name is asked for,
    which the index's docstring says once."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef) or not node.body:
            continue
        for deco in node.decorator_list:
            func = deco.func if isinstance(deco, ast.Call) else deco
            tag = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if tag == "lazy" or tag.endswith("_entry"):
                lines.update(s.lineno for s in node.body if isinstance(s, ast.Import | ast.ImportFrom))
    return lines


def _reason_above(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or above the block of imports it belongs to (one reason
    per block, not one per line)."""
    if "#" in lines[lineno - 1]:
        return True
    k = lineno - 2
    while k >= 0 and lines[k].strip().startswith(("from ", "import ")) and "#" not in lines[k]:
        k -= 1
    return k >= 0 and ("#" in lines[k] if lines[k].strip().startswith(("from ", "import "))
                       else lines[k].strip().startswith("#"))


def test_imports_inside_functions_say_why():
    silent = []
    for name, path in modules().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        factories = _index_factory_lines(path)
        for target, stmt, nested in agl_imports(name, path):
            if not nested or stmt.lineno in factories:
                continue
            if not _reason_above(lines, stmt.lineno):
                silent.append(f"{path.relative_to(SRC)}:{stmt.lineno} imports {target}")
    assert silent == [], "imports inside functions without a reason:\n" + "\n".join(sorted(set(silent)))


def function_import_blocks(path: Path) -> list[int]:
    """The first line of each run of consecutive import statements inside a function (any
    import: agl's, a third party's or the standard library's)."""
    starts: list[int] = []

    def visit(node: ast.AST, nested: bool) -> None:
        inner = nested or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for _, value in ast.iter_fields(node):
            items = value if isinstance(value, list) else [value]
            after_import = False
            for item in items:
                is_import = isinstance(item, ast.Import | ast.ImportFrom)
                if inner and is_import and not after_import:
                    starts.append(item.lineno)
                after_import = is_import
                if isinstance(item, ast.AST):
                    visit(item, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return starts


def test_a_command_module_imports_its_work_in_one_block():
    """`agl --help` imports every command module, so a command module imports its work when it
    runs, and in one place: one block in one function (the handler that hands the parsed
    arguments to the module doing the work, which imports what it needs at its top). Imports
    spread over a module's functions, each with its "(lazy, as above)", were how a command
    grew 16 of them."""
    spread = {}
    for path in sorted((AGL / "commands").glob("*.py")):
        starts = function_import_blocks(path)
        if len(starts) > 1:
            spread[str(path.relative_to(SRC))] = starts
    assert spread == {}, "command modules with more than one block of imports inside functions " \
                         "(file: first lines):\n" + "\n".join(f"{k}: {v}" for k, v in spread.items())


def test_the_block_count_sees_nested_and_separate_imports(tmp_path):
    planted = tmp_path / "cmd.py"
    planted.write_text("import os\n\ndef run(args):\n    import sys\n    from x import y\n\n"
                       "    if args:\n        import json\n    return y\n\n"
                       "def other():\n    import re\n    x = 1\n    import csv\n")
    assert function_import_blocks(planted) == [4, 8, 12, 14]


def test_functions_other_packages_call_have_docstrings():
    mods = modules()
    called: dict[str, set[str]] = defaultdict(set)  # module -> names imported from another package
    for name, path in mods.items():
        pkg = name.split(".")[1] if name.count(".") >= 1 else ""
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("agl."):
                if node.module.split(".")[1] != pkg and node.module in mods:
                    called[node.module].update(a.name for a in node.names)
    missing = []
    for mod, names in called.items():
        tree = ast.parse(mods[mod].read_text(encoding="utf-8"))
        for node in tree.body:
            if (isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names
                    and not node.name.startswith("_") and ast.get_docstring(node) is None):
                missing.append(f"{mod}.{node.name}")
    assert missing == [], "called from other packages without a docstring: " + ", ".join(sorted(missing))
