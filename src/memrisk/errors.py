"""The one exception type memrisk raises for bad input, so callers and the CLI can catch it."""


class MemriskError(ValueError):
    """Bad input or configuration; the message names the problem."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (its type name when it has none), for one-line errors."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
