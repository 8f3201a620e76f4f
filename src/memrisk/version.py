"""memrisk's version, read from the installed distribution's metadata (written once, in pyproject.toml)."""

from importlib.metadata import version

__version__ = version("memrisk")
