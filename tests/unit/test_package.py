"""The top-level package: every public name resolves, and importing it loads neither torch nor transformers."""

from __future__ import annotations

import subprocess
import sys

import pytest

import memrisk


def test_every_public_name_resolves_from_its_module() -> None:
    for name in memrisk.__all__:
        value = getattr(memrisk, name)
        assert value.__name__ == name and value.__module__.startswith("memrisk.")
    assert set(memrisk.__all__) <= set(dir(memrisk))
    with pytest.raises(AttributeError, match="module 'memrisk' has no attribute 'no_such_name'"):
        memrisk.no_such_name  # noqa: B018


def test_import_is_light_until_a_name_is_used() -> None:
    probe = (
        "import sys, memrisk; light = 'torch' not in sys.modules and 'transformers' not in sys.modules; "
        "memrisk.nv_recall; nv = 'torch' not in sys.modules; memrisk.cbs; print(light, nv, 'transformers' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "True", "True"]
