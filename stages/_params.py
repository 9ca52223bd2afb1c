"""Reading params.yaml for the stage scripts (each stage reads only its own sections)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # so a stage runs from a checkout without an install


def load(*sections: str, path: Path = ROOT / "params.yaml") -> dict[str, Any]:
    try:
        params = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        sys.exit(f"{path}: cannot read params ({exc})")
    missing = [s for s in sections if s not in params]
    if missing:
        sys.exit(f"{path}: missing section(s) {', '.join(missing)}")
    return {s: params[s] for s in sections}


def run_main(main) -> None:
    """Run a stage's main with the CLI's error handling: one line, non-zero exit."""
    import warnings

    from agl.core.secrets import scrub_text  # no log line carries a key
    from agl.errors import AglError

    name = Path(sys.argv[0]).name
    warnings.showwarning = lambda message, *a, **k: print(
        scrub_text(f"{name}: warning: {message}"), file=sys.stderr
    )
    try:
        sys.exit(main() or 0)
    except AglError as exc:
        sys.exit(scrub_text(f"{Path(sys.argv[0]).name}: error: {exc}"))
