"""One exception type for bad input: the CLI prints its message as one line and exits 2."""


class AglError(Exception):
    """A user-facing error. The message names the file, row or field, and what to do."""


class ModelGone(AglError):
    """The provider says the model no longer exists: the run stops at once (one line naming
    the model, the provider's message and, where the roster knows one, a successor)."""

    def __init__(self, message: str, *, model: str = "", provider_message: str = ""):
        super().__init__(message)
        self.model = model
        self.provider_message = provider_message


def reject_unknown_keys(params: dict, known: set[str], source: str) -> None:
    """One line naming a params section's unknown keys and the known ones (a typo in
    params.yaml must not fall back to a default silently)."""
    unknown = sorted(set(params) - known, key=str)
    if unknown:
        raise AglError(f"{source}: unknown key(s) {', '.join(map(str, unknown))}; known: "
                       f"{', '.join(sorted(known))}{did_you_mean(unknown, known)}")


def did_you_mean(unknown: list, known: set[str]) -> str:
    """"; did you mean temperature (for temprature)?" for each unknown name with a close known
    one (difflib, as the registry's), else ""."""
    import difflib  # lazy: only a typo pays it

    hints = []
    for name in unknown:
        close = difflib.get_close_matches(str(name), sorted(known), n=1)
        if close:
            hints.append(f"{close[0]} (for {name})")
    return f"; did you mean {', '.join(hints)}?" if hints else ""
