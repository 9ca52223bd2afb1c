"""dvc.yaml names everything a stage's result depends on: code, shipped data and params.

Each stage's script is followed through its whole import closure (tests/stage_closure.py);
every agl module, local helper and shipped data file it can load must sit under one of the
stage's `deps:` (a file or a folder), and every params section or key it reads must be
declared under its `params:`. A stage that forgets one would let `dvc status` call stale
results current.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
from pathlib import Path

import pytest
import yaml
from stage_closure import INTERP, REPO, closure, declared, param_covered

SCRIPT = re.compile(r"python (stages/[\w]+\.py)")


def _normalise(entry: str) -> str:
    """`models.${key}` / `models.${item.model}` -> `models.*` (one entry of the section)."""
    return INTERP.sub("*", entry)


# The stages that run a `models:` entry's backend over the dataset: a backend reading another
# stage's output (the cascade: the curation tables) names it in BUILD_INPUTS.
RUNS_ENTRIES = ("infer",)


def build_inputs(files, repo: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, its BUILD_INPUTS) for each module among `files` that assigns BUILD_INPUTS at
    its top level (read by importing it)."""
    out = []
    for path in sorted(files):
        if not path.suffix == ".py" or "BUILD_INPUTS" not in path.read_text(encoding="utf-8"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "BUILD_INPUTS" for t in n.targets)
               for n in tree.body):
            rel = path.relative_to(repo / "src").with_suffix("")
            module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            out.append((module, tuple(importlib.import_module(module).BUILD_INPUTS)))
    return out


def stage_problems(dvc_yaml: Path, repo: Path = REPO) -> list[str]:
    """Every dependency a stage's script has but its dvc.yaml entry does not declare, and every
    code or shipped-data dep it declares but never loads (an edit there would re-run it for
    nothing)."""
    stages = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    problems = []
    for name, stage in stages.items():
        body = stage.get("do", stage)
        cmd = " ".join(body["cmd"]) if isinstance(body["cmd"], list) else body["cmd"]
        m = SCRIPT.search(cmd)
        if not m:
            problems.append(f"stage {name}: its cmd runs no stages/<script>.py")
            continue
        deps = [_normalise(d) for d in body.get("deps", [])]
        params = [_normalise(p) if isinstance(p, str) else next(iter(p)) for p in body.get("params", [])]
        c = closure(repo / m.group(1), repo / "src")
        for path in sorted(c.files | c.data):
            if not any(declared(d, path, repo) for d in deps if "*" not in d):
                problems.append(f"stage {name}: {path.relative_to(repo)} is loaded but not under its deps")
        for dep in deps:
            if dep.startswith("src/") and "*" not in dep and not any(
                    declared(dep, path, repo) for path in c.files | c.data):
                problems.append(f"stage {name}: declares {dep} but never loads it")
        if name in RUNS_ENTRIES:
            for module, inputs in build_inputs(c.files, repo):
                for rel in inputs:
                    if not any(declared(d, repo / rel, repo) for d in deps if "*" not in d):
                        problems.append(f"stage {name}: {rel} is read by {module} but not under its deps")
        reads = set(c.params) | {_normalise(x).split()[0] for x in INTERP.findall(cmd)
                                 if not x.startswith(("key", "item"))}
        for section in sorted(reads):
            if not param_covered(section, params):
                problems.append(f"stage {name}: reads params '{section}' but does not declare it")
    return problems


def test_every_stage_declares_what_it_loads():
    assert stage_problems(REPO / "dvc.yaml") == []


def test_a_missing_dep_is_named(tmp_path):
    """The check is live: drop one package from one stage and it names the stage and a file."""
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    evaluate = doc["stages"]["evaluate"]["do"]
    evaluate["deps"].remove("src/agl/scoring")
    evaluate["params"].remove("models.${key}")
    broken = tmp_path / "dvc.yaml"
    broken.write_text(yaml.safe_dump(doc, sort_keys=False))
    problems = stage_problems(broken)
    assert "stage evaluate: src/agl/scoring/evaluate.py is loaded but not under its deps" in problems
    assert "stage evaluate: reads params 'models.*' but does not declare it" in problems
    assert all(p.startswith("stage evaluate:") for p in problems)


def test_a_curation_table_the_cascade_reads_is_a_dep_of_infer(tmp_path):
    """infer@ runs any backend, and the cascade reads the curation tables (BUILD_INPUTS): they
    were not declared, so a changed speech.csv left its cascade runs current."""
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    doc["stages"]["infer"]["do"]["deps"].remove("build/curation/speech_windows.jsonl")
    broken = tmp_path / "dvc.yaml"
    broken.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert stage_problems(broken) == ["stage infer: build/curation/speech_windows.jsonl is read by "
                                      "agl.backends.cascade but not under its deps"]


def test_a_new_import_is_followed(tmp_path):
    """An import added inside a function of a library module is part of the closure."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "agl", src / "agl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    assert not [p for p in stage_problems(tmp_path / "dvc.yaml", tmp_path) if p.startswith("stage tag:")]
    tagging = src / "agl" / "curation" / "tagging.py"
    tagging.write_text(tagging.read_text() + "\n\ndef _late():\n    from agl.report import plots  # noqa\n")
    assert ("stage tag: src/agl/report/plots.py is loaded but not under its deps"
            in stage_problems(tmp_path / "dvc.yaml", tmp_path))


def _copy_tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "agl", src / "agl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    return src


def test_a_module_the_registry_loads_is_followed(tmp_path):
    """The backends' index (agl/backends/__init__.py) imports each backend inside its factory:
    an import added to a backend is a dependency of every stage that can look a backend up."""
    src = _copy_tree(tmp_path)
    assert stage_problems(tmp_path / "dvc.yaml", tmp_path) == []
    knn = src / "agl" / "backends" / "knn.py"
    knn.write_text(knn.read_text() + "\nimport agl.counterfactual.perturb  # noqa: E402,F401\n")
    problems = stage_problems(tmp_path / "dvc.yaml", tmp_path)
    for stage in ("infer", "judge", "localize"):
        assert f"stage {stage}: src/agl/counterfactual/perturb.py is loaded but not under its deps" in problems


def test_a_declared_package_never_loaded_is_named(tmp_path):
    """Declaring code a stage never loads re-runs it on every edit there: the check names it."""
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    doc["stages"]["filter"]["deps"].append("src/agl/report")
    broken = tmp_path / "dvc.yaml"
    broken.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert stage_problems(broken) == ["stage filter: declares src/agl/report but never loads it"]


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "stages").glob("[!_]*.py")))
def test_stage_scripts_share_one_convention(script):
    """argparse, params through `_params.load`, errors through `_params.run_main`."""
    text = (REPO / "stages" / script).read_text(encoding="utf-8")
    assert "argparse.ArgumentParser(description=__doc__)" in text
    assert "run_main(main)" in text
    assert "sys.argv" not in text and "yaml.safe_load" not in text
