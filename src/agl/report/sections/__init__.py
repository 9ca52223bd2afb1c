"""The report's optional sections, one module each, each with one signature:

    section(ctx: SectionContext) -> str | None

the section's HTML (its tables written to `ctx.tables`, its figures to `ctx.figs`), or None
when its input was not given (then the page has no trace of it). They are discovered here
like the `agl` commands (`pkgutil.iter_modules`), so adding a section edits no other file,
and rendered in the order of their module names, before the provenance.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agl.report.inputs import ReportInputs, ReportOptions, RunInput


@dataclass(frozen=True)
class SectionContext:
    """What a section is given: every run the report collected, the runs on the pipeline's
    data version (best first), the report's inputs and options, and where to write."""

    runs: list[RunInput]
    pipeline_runs: list[RunInput]
    inputs: ReportInputs
    options: ReportOptions
    figs: Path
    tables: Path


Section = Callable[[SectionContext], "str | None"]


def discover() -> list[tuple[str, Section]]:
    """(name, section function) of every module of this package, by name."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            found.append((info.name, importlib.import_module(f"agl.report.sections.{info.name}").section))
    return found


def render(ctx: SectionContext) -> list[str]:
    """The HTML of every section that has its input, in order."""
    return [html for _, make in discover() if (html := make(ctx)) is not None]
