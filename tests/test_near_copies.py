"""No near-copies: a block of code written twice drifts apart when one copy is fixed.

* src/agl and stages/: no statement of `MIN_NODES` AST nodes or more (a loop filling a row, a
  try/except reading a table) appears twice, names aside (`row[c] = res.get(c)` and
  `out[c] = late.get(c)` are one statement);
* tests/: a plain helper function (not a test, not a fixture) defined alike in two test
  modules belongs in tests/helpers.py (`run_agl` was written out in three modules).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIN_NODES = 60  # the leaderboard's two row fills were 92 nodes each; a guard clause is ~15
MIN_HELPER_NODES = 30  # a four-line helper


def _shape(node: ast.AST) -> str:
    """The statement's AST without positions or names."""
    return re.sub(r"Name\('[^']*'", "Name('_'", ast.dump(node, annotate_fields=False))


def _size(node: ast.AST) -> int:
    return sum(1 for _ in ast.walk(node))


def _files(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((REPO / f).rglob("*.py")) if "__pycache__" not in p.parts]


def test_no_block_of_the_code_is_written_twice():
    where: dict[str, list[str]] = defaultdict(list)
    for path in _files("src/agl", "stages"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.stmt) and not isinstance(node, ast.FunctionDef | ast.ClassDef) \
                    and _size(node) >= MIN_NODES:
                where[_shape(node)].append(f"{path.relative_to(REPO)}:{node.lineno}")
    twice = sorted(places for places in where.values() if len(places) > 1)
    assert not twice, f"the same block in two places (one helper instead): {twice}"


def test_a_test_helper_is_written_once():
    where: dict[str, list[str]] = defaultdict(list)
    for path in _files("tests"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.decorator_list \
                    and not node.name.startswith("test_") and _size(node) >= MIN_HELPER_NODES:
                where[_shape(node)].append(f"{path.relative_to(REPO)}:{node.name}")
    twice = sorted(places for places in where.values() if len(places) > 1)
    assert not twice, f"one helper written in several test modules (move it to tests/helpers.py): {twice}"
