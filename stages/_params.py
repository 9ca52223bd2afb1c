"""What every stage script shares: reading params.yaml and reporting errors in one line.

A stage reads params only through `load`, naming each section (or `section.key`) it reads;
tests/test_stage_deps.py checks that `dvc.yaml` declares every one of them, so a changed knob
re-runs exactly the stages that read it.
"""

from __future__ import annotations

import copy
import hashlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # so a stage runs from a checkout without an install
INTERRUPTED = "interrupted; `dvc repro` resumes where it stopped"


def _interrupted_while_starting(signum, frame) -> None:
    # Ctrl-C while the stage is still importing (pandas, torch: seconds): nothing is written
    # yet, so one line and out, not a traceback through the import machinery. run_main puts
    # Python's own handler back, so an interrupt inside main is a KeyboardInterrupt.
    sys.stderr.write(f"{Path(sys.argv[0]).name}: {INTERRUPTED}\n")
    sys.stderr.flush()
    os._exit(130)


signal.signal(signal.SIGINT, _interrupted_while_starting)


def load(*keys: str, path: Path | str | None = None, required: bool = True) -> dict[str, Any]:
    """The params named by `keys` ("evaluate", or a dotted "models.knn"), keyed as named.

    A missing key is a one-line exit naming the file, unless `required` is False (then None);
    a statistical knob that breaks its rule (agl.core.checks: a negative bootstrap count, a
    seed that is not a whole number, ...) is an AglError naming the key.
    """
    path = Path(path) if path else ROOT / "params.yaml"
    params = _checked(path)
    out: dict[str, Any] = {}
    missing = []
    for key in keys:
        node: Any = params
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        if node is None and required:
            missing.append(key)
        out[key] = node
    if missing:
        sys.exit(f"{path}: missing {', '.join(missing)}; add it (docs/pipeline.md lists what each stage reads)")
    from agl.core.checks import check_params  # one line each

    source = "params.yaml" if path == ROOT / "params.yaml" else str(path)
    for key, node in out.items():
        if node is not None:
            check_params(key, node, source)
    return copy.deepcopy(out)  # the file's parse is shared by this process's calls


# A stage that reads params in several calls parses and checks the file once (each parse of
# params.yaml and of dvc.yaml beside it cost ~0.035 s of CPU, ~50 calls per demo repro).
_CHECKED: dict[tuple[str, str] | None, dict[str, Any]] = {}


def _checked(path: Path) -> dict[str, Any]:
    """The params file read (duplicate keys, bounds, UTF-8), free of credentials and of unknown
    sections; one line and exit otherwise. Parsed again only when its bytes changed."""
    from agl.core.yamlfile import load_yaml  # duplicate keys, bounds, UTF-8: one line each
    from agl.errors import AglError

    try:
        # by content: a file rewritten within the clock's tick keeps its mtime and maybe its size
        key = (str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest())
    except OSError:  # missing, a folder, unreadable: load_yaml names it below
        key = None
    if key in _CHECKED:
        return _CHECKED[key]
    try:
        params = load_yaml(path)
    except FileNotFoundError:
        sys.exit(f"{path}: not found; run from the repository root")
    except AglError as exc:
        sys.exit(str(exc))
    from agl.core.checks import check_sections
    from agl.core.secrets import check_config

    # No credential anywhere in the file: DVC copies params into dvc.lock, MLflow logs them.
    check_config(params, "params.yaml" if path == ROOT / "params.yaml" else str(path))
    try:
        check_sections(params, path)  # `evalute:` is no section: its knobs would be ignored
    except AglError as exc:
        sys.exit(str(exc))
    if key is not None:
        _CHECKED[key] = params
    return params


def run_main(main) -> None:
    """Run a stage's main with the CLI's error handling: one line, non-zero exit."""
    import warnings

    from agl.core.secrets import scrub_output  # no line printed carries a key, tracebacks too
    from agl.errors import AglError

    scrub_output()
    name = Path(sys.argv[0]).name
    warnings.showwarning = lambda message, *a, **k: print(
        f"{name}: warning: {message}", file=sys.stderr
    )
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sys.exit(main() or 0)
    except AglError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # what was written is whole (files are renamed into place)
        print(f"{name}: {INTERRUPTED}", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:  # a full disk, a read-only folder: one line, not a traceback
        from agl.core.diskwrite import disk_error

        err = disk_error(exc)
        if err is None:
            raise
        print(f"{name}: error: {err}", file=sys.stderr)
        sys.exit(1)
