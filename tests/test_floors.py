"""Floors that import only downward (docs/pipeline.md#the-code).

The library is a stack of floors. A package imports only packages on lower floors: never one
on its own floor, never one above. So a change in the report cannot make the inference stages
re-run, a backend cannot reach for the batch machinery, and the package graph has no cycle by
construction. No module reaches into another package's `_private` names either: a private
name is free to change with its own package.

Every `import agl...` counts, at any depth (inside functions too), and so does a registry's
`import_module("agl.<pkg>...")`. `stages/` and `benchmarks/` stand above every floor.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

from stage_closure import import_sites

REPO = Path(__file__).resolve().parents[1]

# Bottom to top. `agl` is the package's face (`agl/__init__.py`: the version only).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("agl", "errors"),
    ("core",),
    ("http",),
    ("contracts", "dataset", "predictions", "verify", "executor"),
    ("scoring", "prompts"),
    ("counterfactual", "speech", "birds"),
    ("backends",),
    ("inference",),
    ("curation",),
    ("judges",),
    ("report", "game", "interchange", "tracking"),
    ("explore",),
    ("commands",),
    ("cli",),
)
FLOOR = {pkg: i for i, floor in enumerate(FLOORS) for pkg in floor}
ENTRANCES = ("stages", "benchmarks")  # above every floor: they may import anything public


@dataclass(frozen=True)
class Breach:
    module: str  # the importing module, dotted
    line: int
    target: str  # the imported module (and name)
    why: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}: {self.why}"


def _package_of(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "agl"


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(line, imported agl module, imported names) for every agl import of a module's AST."""
    package = module if is_package else module.rsplit(".", 1)[0]
    for line, target, names in import_sites(tree, package):
        target = target.removesuffix(".*")  # a registry: its package
        if target == "agl" or target.startswith("agl."):
            yield line, target, names


def breaches(src: Path, entrances: tuple[Path, ...] = ()) -> list[Breach]:
    """Every import of `src/agl` (and of the entrance scripts) that breaks the floors."""
    found: list[Breach] = []
    files = [(p, _module_name(p, src)) for p in sorted((src / "agl").rglob("*.py")) if "__pycache__" not in p.parts]
    for folder in entrances:
        files += [(p, f"{folder.name}.{p.stem}") for p in sorted(folder.glob("*.py"))]
    unplaced: set[str] = set()
    for path, module in files:
        own = _package_of(module) if module.startswith("agl") else module.split(".")[0]
        if own not in FLOOR and own not in ENTRANCES:
            if own not in unplaced:
                unplaced.add(own)
                found.append(Breach(module, 1, module, f"package '{own}' is on no floor: add it to FLOORS"))
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, target, names in _imports(tree, module, path.name == "__init__.py"):
            dst = _package_of(target)
            same = own == dst
            if dst not in FLOOR:
                found.append(Breach(module, line, target, f"package '{dst}' is on no floor"))
            elif not same and own in FLOOR and FLOOR[dst] >= FLOOR[own]:
                where = "the same floor as" if FLOOR[dst] == FLOOR[own] else "a higher floor than"
                found.append(Breach(module, line, target, f"'{dst}' is on {where} '{own}' "
                                    f"(floor {FLOOR[dst]} vs {FLOOR[own]})"))
            if same:
                continue
            private = [p for p in target.split(".")[1:] if _is_private(p)] + [n for n in names if _is_private(n)]
            if private:
                found.append(Breach(module, line, f"{target} ({', '.join(private)})",
                                    f"a private name of package '{dst}'"))
    return found


def test_every_import_runs_down_the_floors():
    found = breaches(REPO / "src", tuple(REPO / e for e in ENTRANCES))
    assert not found, "imports against the floors:\n" + "\n".join(map(str, found))


def test_every_package_has_a_floor():
    packages = {p.name for p in (REPO / "src/agl").iterdir() if (p / "__init__.py").is_file()}
    packages |= {p.stem for p in (REPO / "src/agl").glob("*.py") if p.stem != "__init__"}
    assert packages <= set(FLOOR), f"packages on no floor: {sorted(packages - set(FLOOR))}"


def _plant(root: Path, files: dict[str, str]) -> Path:
    src = root / "src"
    for rel, text in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    for folder in {p.parent for p in src.rglob("*.py")}:
        (folder / "__init__.py").touch()
    return src


def test_a_planted_upward_import_is_caught(tmp_path):
    src = _plant(tmp_path, {
        "agl/core/geo.py": "X = 1\n",
        "agl/report/page.py": "from agl.core.geo import X\n",  # down: fine
        "agl/scoring/metrics.py": "def f():\n    from agl.report.page import X  # upward, inside a function\n",
        "agl/speech/listen.py": "import agl.birds.birdnet\n",  # same floor
        "agl/dataset/x.py": "import importlib\nimportlib.import_module(f'agl.curation.{1}')\n",  # registry, up
    })
    found = {(b.module, b.target.split(" ")[0]) for b in breaches(src)}
    assert found == {("agl.scoring.metrics", "agl.report.page"), ("agl.speech.listen", "agl.birds.birdnet"),
                     ("agl.dataset.x", "agl.curation")}


def test_a_planted_private_import_is_caught(tmp_path):
    src = _plant(tmp_path, {
        "agl/core/_helpers.py": "def scrub():\n    pass\n",
        "agl/core/secrets.py": "from agl.core._helpers import scrub\n\ndef _hidden():\n    pass\n",  # own package
        "agl/inference/runner.py": "from agl.core.secrets import _hidden\n",
        "agl/report/page.py": "from agl.core._helpers import scrub\n",
    })
    found = sorted(str(b) for b in breaches(src))
    assert len(found) == 2, found
    assert "agl.inference.runner:1 imports agl.core.secrets (_hidden): a private name of package 'core'" in found
    assert any(s.startswith("agl.report.page:1 imports agl.core._helpers (_helpers)") for s in found)


def test_a_package_on_no_floor_is_caught(tmp_path):
    src = _plant(tmp_path, {"agl/newpkg/x.py": "import agl.core.geo\n", "agl/core/geo.py": ""})
    assert [b.why for b in breaches(src)] == ["package 'newpkg' is on no floor: add it to FLOORS"]


def _stage_deps(stage: str) -> list[str]:
    import yaml

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    entry = stages[stage]
    return [d for d in entry.get("do", entry).get("deps", [])]


def test_the_report_and_the_audio_stages_depend_on_what_they_read():
    report = _stage_deps("report")
    for pkg in ("backends", "inference", "batch"):
        assert f"src/agl/{pkg}" not in report, f"report depends on src/agl/{pkg}"
    for stage in ("perturb", "listen", "counterfactual"):
        assert "src/agl/report" not in _stage_deps(stage), f"{stage} depends on src/agl/report"


def test_backends_hold_no_batch_code():
    backends = REPO / "src/agl/backends"
    assert not [p.name for p in backends.glob("*batch*")]
    for path in backends.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for _, target, _ in _imports(tree, f"agl.backends.{path.stem}", path.name == "__init__.py"):
            assert ".batch" not in target, f"{path.name} imports {target}"


def _functions(paths):
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path, node


def test_functions_stay_small_and_stages_thin():
    """Long signatures become frozen configs; a stage reads params, calls one function, writes."""
    code = sorted((REPO / "src/agl").rglob("*.py")) + sorted((REPO / "stages").glob("*.py"))
    long, wide, thick = [], [], []
    for path, fn in _functions(code):
        where = f"{path.relative_to(REPO)}:{fn.name}"
        lines = fn.end_lineno - fn.lineno + 1
        a = fn.args
        params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
        params -= bool(a.args) and a.args[0].arg in ("self", "cls")
        if lines > 60:
            long.append(f"{where} ({lines} lines)")
        if params > 8:
            wide.append(f"{where} ({params} parameters)")
        if path.parent.name == "stages" and fn.name == "main" and lines > 40:
            thick.append(f"{where} ({lines} lines)")
    assert len(long) <= 8, f"more than 8 functions over 60 lines: {long}"
    assert not wide, f"functions over 8 parameters (pass a frozen config): {wide}"
    assert not thick, f"stage mains over 40 lines (move the work into src/agl): {thick}"
