"""Inputs given as URLs or paper:<name>: params.yaml's bounds under a command's flags, one
rule for `agl evaluate`, `agl power` and `agl import` (their flags: agl.commands.evaluate's
add_source_options)."""

from __future__ import annotations

import argparse

from agl.dataset.sources import SCHEME, SourceConfig, is_url
from agl.errors import AglError


def source_config(args: argparse.Namespace, *specs: str):
    """params.yaml's source settings (agl.dataset.sources) with the command's bounds, where
    one of `specs` is fetched (a URL or paper:<name>); None otherwise (nothing to read)."""
    if not any(str(s).startswith(SCHEME) or is_url(str(s)) for s in specs):
        return None
    config = SourceConfig.load()
    for key in ("deadline_s", "max_bytes"):
        value = getattr(args, key)
        if value is not None:
            if value <= 0:
                raise AglError(f"--{key.replace('_', '-')} must be positive, got {value:g}")
            setattr(config, key, value)
    return config
