"""Subcommands of `agl`: one module each, with `register(subparsers)`; discovered by agl.cli."""
