"""The `agl` command line.

Each subcommand lives in `agl.commands.<name>` and exposes `register(subparsers)`;
the modules are discovered here, so adding a command never edits this file.
Command modules import nothing heavy at module level, so `agl --help` is instant: each
imports its work in one block, in the handler it registers, when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import warnings

import agl.commands as commands
from agl import __version__
from agl.core.diskwrite import disk_error
from agl.core.secrets import scrub_text, scrubbed_output
from agl.core.workspace import refuse_outside_root
from agl.errors import AglError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agl", description="AGL1K audio geo-localization benchmark: data, inference, metrics."
    )
    parser.add_argument("--version", action="version", version=f"agl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"agl.commands.{info.name}").register(sub)
    return parser


def _one_line_warnings(prefix: str) -> None:
    """Show warnings (e.g. a repaired manifest) as one plain line, not a source listing."""
    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
        print(scrub_text(f"{prefix}: warning: {message}"), file=sys.stderr)

    warnings.showwarning = show


# The commands that read the project's files by paths relative to its root (dvc.lock,
# params.yaml, build/, data/): run in a subfolder they name the root in one line.
# (download and demo, which write data/, say the same: agl.core.workspace.refuse_inside_project.)
FROM_ROOT = frozenset({"verify", "report", "explore", "export", "mlflow"})


def _names_its_repo(args: argparse.Namespace) -> bool:
    """`agl verify --repo DIR` names the project itself: no guess about the working folder."""
    repo = getattr(args, "repo", None)
    return repo is not None and str(repo) != "."


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _one_line_warnings(f"agl {args.command}")
    with scrubbed_output():  # no line printed carries a key, whoever prints it
        try:
            if args.command in FROM_ROOT and not _names_its_repo(args):
                refuse_outside_root(f"agl {args.command}")
            return int(args.func(args) or 0)
        except AglError as exc:
            print(f"agl {args.command}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"agl {args.command}: interrupted; rerun the same command to resume.",
                  file=sys.stderr)
            return 130
        except BrokenPipeError:  # `agl verify | head`: the reader is gone; no traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # as Python's docs do
            return 141
        except OSError as exc:  # a full disk, a read-only folder: one line, not a traceback
            err = disk_error(exc)
            if err is None:
                raise
            print(f"agl {args.command}: error: {err}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
