"""The work of `agl mlflow` (agl.commands.mlflowui registers the command and imports this
module when it runs): the saved view's link."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from agl.core.secrets import known_secrets, scrub_text
from agl.core.tracking import runs_view_url, tracking_uri  # mlflow loads on use
from agl.errors import AglError


def run(args: argparse.Namespace) -> int:
    print(runs_view_url(args.experiment or _params_experiment(args.params)))
    uri = tracking_uri()
    if not uri.startswith(("http://", "https://")):
        print(f"(serve the store first: mlflow ui --backend-store-uri {scrub_text(uri, known_secrets())})")
    return 0


def _params_experiment(path: Path) -> str | None:
    """The params file's mlflow.experiment, if it names one."""
    if not path.exists():
        return None
    try:
        params = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise AglError(f"{path}: not valid YAML ({exc})") from None
    section = params.get("mlflow") if isinstance(params, dict) else None
    return section.get("experiment") if isinstance(section, dict) else None
