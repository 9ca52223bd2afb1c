"""Subcommands of `agl`: one module each, with `register(subparsers)`; discovered by agl.cli.

A command module registers its flags and imports its work in one block, in the handler it
registers, when the command runs (`agl --help` imports every command module): the work lives
in the library, or, where the command itself has more to do than call one function, in a
private module beside it (`_<name>_impl.py`, not a command: agl.cli skips `_` names) that
imports what it needs at its top.
"""
