"""The C allocator keeps freed memory for the next tensor once memrisk loads a CPU model (`models/allocator.py`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memrisk.models import allocator

ROUNDS = """
import importlib.util, resource, sys, torch

spec = importlib.util.spec_from_file_location("allocator", sys.argv[1])  # the module alone, without memrisk's imports
allocator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(allocator)
logits = torch.randn(400, 4096)

def faults():
    # what a scored batch does: short-lived temporaries a few positions at a time, then one wide tensor (160 MiB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for part in logits.tensor_split(50):
        p = torch.log_softmax(part, -1).exp()
        (p * part).sum(-1)
    torch.ones(40, 2**20)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

def fewest_faults():
    # of three rounds after a first: a round may also grow the heap by a few unrelated 128 KiB blocks
    return min([faults() for _ in range(4)][1:])

print(fewest_faults(), allocator.keep_freed_memory(), fewest_faults())
"""


@pytest.mark.skipif(allocator._glibc() is None, reason="the thresholds are glibc's")
def test_freed_tensors_are_reused_instead_of_faulted_in_again() -> None:
    """In a fresh process glibc maps the 160 MiB tensor afresh each round (40,960 faults of 4 KiB pages, or 80 of
    2 MiB where the kernel gives huge pages unasked); once memory is kept, a round reuses the heap's pages. A round
    of either kind can also fault in a few blocks of 32 pages that the heap's layout happened to need (seen once in
    a test run as 64 faults), so each count is the fewest of three rounds, and a kept round may fault in at most a
    sixteenth of what a fresh one does."""
    env = {k: v for k, v in os.environ.items() if k not in allocator.USER_SETTINGS}
    out = subprocess.run([sys.executable, "-c", ROUNDS, allocator.__file__], env=env, capture_output=True, text=True,
                         check=True)
    system, kept, reused = out.stdout.split()
    assert kept == "True"
    assert int(system) >= 64 and int(reused) * 16 <= int(system), (system, reused)


def test_a_users_own_allocator_settings_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert allocator.keep_freed_memory.__wrapped__() is False
