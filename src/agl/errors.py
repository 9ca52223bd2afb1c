"""One exception type for bad input: the CLI prints its message as one line and exits 2."""


class AglError(Exception):
    """A user-facing error. The message names the file, row or field, and what to do."""
