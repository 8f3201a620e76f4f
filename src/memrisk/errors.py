"""The one exception type memrisk raises for bad input, so callers and the CLI can catch it."""


class MemriskError(ValueError):
    """Bad input or configuration; the message names the problem."""
