"""Signatures: the settings behind a number, as one short string printed next to it (as sacrebleu signs its scores).

`cbs|policy:topk40-t1|B:20|prune:levenshtein|eps:5|anchor:yes|tau:0.001|memrisk:0.5.0` is enough
to re-run the computation that produced a number copied into a paper.
"""

from __future__ import annotations

from typing import Any

from memrisk.version import __version__


def _value(value: Any) -> str:
    """A setting as it appears in a signature: booleans as yes/no, None as none, floats in short form."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def signature(method: str, **settings: Any) -> str:
    """`method|key:value|...|memrisk:VERSION`, keys in the order given."""
    parts = [method, *(f"{key}:{_value(value)}" for key, value in settings.items()), f"memrisk:{__version__}"]
    return "|".join(parts)
