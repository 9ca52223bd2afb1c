"""What a DVC stage really depends on: its script's import closure, data files and params.

Used by tests/test_stage_deps.py. The closure follows every `import agl...` and
`from agl... import ...` in a file, at any depth (inside functions too), plus the stage
script's local helpers (`import _params`). The registries (agl.core.registry) need nothing
more: their indexes import each part inside a small factory, which is an import like any
other. Two dynamic patterns are followed as well:

* `import_module(f"agl.<pkg>.{name}")` (modules loaded by name, as agl.cli loads the
  commands) pulls in every module of `agl.<pkg>`;
* a string constant that names a file shipped inside `src/agl` (a prompt, a data table) is a
  data dependency of the module that holds it.

Params: a stage reads params only through `_params.load("section", ...)`; `${a.b}` in its
`cmd` reads `a.b` as well.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
AGL = SRC / "agl"


def module_file(name: str, src: Path = SRC) -> Path | None:
    """The file of a dotted module name under `src` (a package's `__init__.py`), or None."""
    base = src.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _data_files(src: Path) -> dict[str, Path]:
    """Files shipped inside the package that a module may name: by file name."""
    out: dict[str, Path] = {}
    for p in (src / "agl").rglob("*"):
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts:
            out.setdefault(p.name, p)
    return out


@dataclass
class Closure:
    files: set[Path] = field(default_factory=set)  # .py files (agl modules and stage helpers)
    data: set[Path] = field(default_factory=set)  # non-Python files under src/agl the code names
    params: set[str] = field(default_factory=set)  # params sections / keys read


def _called(node: ast.Call) -> str:
    """The name a call is made through: `f(...)` -> f, `m.f(...)` -> f."""
    return getattr(node.func, "attr", getattr(node.func, "id", ""))


def import_sites(tree: ast.AST, package: str):
    """(line, module, names imported from it) for every import in an AST, resolved to absolute
    names; `import_module(f"agl.<pkg>.{...}")` gives `agl.<pkg>.*` (its whole
    package), a plain `import_module("agl.x")` gives `agl.x`. `package`: the module's package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield node.lineno, mod, tuple(a.name for a in node.names)
        elif isinstance(node, ast.Call) and _called(node) == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                yield node.lineno, str(arg.values[0].value).rstrip(".") + ".*", ()
            elif isinstance(arg, ast.Constant):
                yield node.lineno, str(arg.value), ()


def _imports(tree: ast.AST, package: str) -> set[str]:
    """Dotted names of every module an AST imports (absolute, agl or local)."""
    out: set[str] = set()
    for _, mod, names in import_sites(tree, package):
        out.add(mod)
        out.update(f"{mod}.{name}" for name in names)  # `from agl.x import module`
    return out


def _params_read(tree: ast.AST) -> set[str]:
    """Sections named in `_params.load(...)` calls; an f-string `"models.{x}"` reads `models.*`."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "_params"):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.add(arg.value)
                elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                    out.add(str(arg.values[0].value).rstrip(".") + ".*")
    return out


@functools.cache
def _facts(path: Path, package: str, _mtime_ns: int) -> tuple[frozenset, frozenset, tuple]:
    """One file's params reads, string constants (as file names) and imports, parsed once
    per content (the mtime is part of the key): every stage's closure shares the library's
    modules, so the 28 stages of dvc.yaml parse each module once, not once each."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    strings = {Path(node.value).name if "/" in node.value else node.value
               for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return frozenset(_params_read(tree)), frozenset(strings), tuple(sorted(_imports(tree, package)))


def closure(script: Path, src: Path = SRC) -> Closure:
    """Everything `script` (a stage script) can load: agl modules, local helpers, data, params."""
    data_by_name = _data_files(src)
    result = Closure()
    todo = [(script, "")]
    seen: set[Path] = set()
    while todo:
        path, package = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        result.files.add(path)
        params, strings, imports = _facts(path, package, path.stat().st_mtime_ns)
        if path.parent == script.parent:
            result.params |= params
        result.data |= {data_by_name[name] for name in strings if name in data_by_name}
        for name in imports:
            if name.endswith(".*"):
                pkg = name[:-2]
                pkg_dir = src.joinpath(*pkg.split("."))
                for f in sorted(pkg_dir.glob("*.py")):
                    todo.append((f, pkg))
                name = pkg
            if name.split(".")[0] == "agl":
                for dotted in [*_parents(name), name]:
                    f = module_file(dotted, src)
                    if f is not None:
                        todo.append((f, dotted if f.name == "__init__.py" else dotted.rsplit(".", 1)[0]))
            else:
                local = script.parent / f"{name}.py"  # a stage script's own helper (_params)
                if "." not in name and local.is_file():
                    todo.append((local, ""))
    return result


def declared(dep: str, path: Path, repo: Path = REPO) -> bool:
    """Does a `deps:` entry (a file or a folder, relative to the repo) cover `path`?"""
    d = (repo / dep).resolve()
    p = path.resolve()
    return p == d or d in p.parents


INTERP = re.compile(r"\$\{([^}]+)\}")


def param_covered(read: str, declared_params: list[str]) -> bool:
    """Is a read section/key covered by the stage's `params:` (a section or a key under it)?"""
    read_parts = read.split(".")
    for dec in declared_params:
        dec_parts = dec.split(".")
        if read_parts[: len(dec_parts)] == dec_parts:  # declared the section, or a parent of the key
            return True
        if read_parts[-1] == "*" and dec_parts[: len(read_parts) - 1] == read_parts[:-1]:
            return True  # models.* read as one entry, declared as models.${key}
    return False
