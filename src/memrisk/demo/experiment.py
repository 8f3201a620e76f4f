"""The demo's experiment: its datasets (planted passages by duplication count, templates, the generic sentence, the
held-out control), windows, policies and methods, for any model; `memrisk demo` and `base: demo` studies run it."""

from __future__ import annotations

from typing import Any

from memrisk import defaults
from memrisk.cache import cache_root
from memrisk.config import ExperimentConfig, parse_config
from memrisk.demo.corpus import DemoCorpus, generic_documents, training_corpus_file, write_training_corpus
from memrisk.models.backend import LanguageModel

DEMO_BATCH_SIZE = defaults.SHARD_SIZE
"""Windows a batch for the demo's own models: every window of a shard, the runner's unit of work. They are small enough
for CBS's 64 × 21 rows a decode step, and their forwards of few rows are mostly fixed cost: against 16 windows a batch,
greedy decoding takes 0.6× and CBS 0.8× the time, with the same records but for CBS's floats at float32 rounding
(docs/performance.md)."""
OTHER_MODEL_BATCH_SIZE = 16
"""Windows a batch for any other model measured on the demo's experiment (`memrisk demo --model`, a `base: demo` study
with such a model): as the demo has always run them, since a pretrained model's KV cache for 64 × 21 rows is gigabytes."""
DEMO_POLICIES = [{"top_k": 40}, {"name": "full"}]
DEMO_GENERIC_WINDOWS = 16
# n is calibrated on simple sentences of the demo model's own domain (reference-documentation
# idiom): the PA paper's Appendix B set is web and e-mail English this model never saw, so it
# would set n by text of another domain.
DEMO_GENERIC_SEQUENCES = [
    "Return a new list containing all items from the iterable in ascending order. A custom key function can be "
    "supplied to customize the sort order, and the reverse flag can be set to request the result in descending order.",
    "If the optional argument is not given, the default value is used instead. Raise a TypeError if the argument is "
    "not an integer, and raise a ValueError if it is negative or larger than the size of the sequence.",
    "Return True if the object is an instance of the class or of a subclass thereof, and False otherwise. If the "
    "object is not an instance of a class, the function always returns False.",
    "This function is deprecated since version 3.8 and will be removed in a future release. Use the new function "
    "instead, which accepts the same arguments and returns the same result.",
    "The return value is a string containing the name of the file. If the file does not exist, an exception is "
    "raised. The file is opened in text mode unless the mode argument says otherwise.",
    "Create a new dictionary with keys from the iterable and values set to the given value. All of the values refer "
    "to just a single instance, so it generally does not make sense for the value to be a mutable object.",
    "Return the number of items in the container. The argument may be a sequence such as a string, bytes, tuple, "
    "list, or range, or a collection such as a dictionary, set, or frozen set.",
    "Close the file. A closed file cannot be read or written any more. Any operation which requires that the file be "
    "open will raise a ValueError after the file has been closed. Calling this method more than once is allowed.",
]
DEMO_CORPUS_FOLDER = "demo-corpus"
"""The cache folder of the demo's training corpora (JSONL), indexed for the windows' corpus counts."""
DEMO_PRIOR_AWARE = {
    "prefixes_per_trial": 10, "trials": 2, "bank_datasets": ["heldout"], "generic_sequences": DEMO_GENERIC_SEQUENCES,
}


def demo_batch_size(own_models: bool) -> int:
    """The demo experiment's windows a batch: DEMO_BATCH_SIZE when every model is one of the demo's own, else
    OTHER_MODEL_BATCH_SIZE."""
    return DEMO_BATCH_SIZE if own_models else OTHER_MODEL_BATCH_SIZE


def demo_config(
    corpus: DemoCorpus, model: str, generic: list[str], gguf_file: str | None = None, batch_size: int = DEMO_BATCH_SIZE,
) -> ExperimentConfig:
    """The demo's experiment, validated (see `demo_settings`)."""
    return parse_config(demo_settings(corpus, model, generic, gguf_file, batch_size))


def demo_generic(corpus: DemoCorpus, lm: LanguageModel) -> list[str]:
    """The generic dataset's documents as `lm`'s tokenizer cuts them: the first DEMO_GENERIC_WINDOWS contexts."""
    return generic_documents(corpus, lm.encode_with_offsets)[:DEMO_GENERIC_WINDOWS]


def write_demo_corpus(corpus: DemoCorpus) -> None:
    """Write the training corpus the demo's experiment counts in (once; a dry run reads the settings without it)."""
    write_training_corpus(corpus, cache_root() / DEMO_CORPUS_FOLDER)


def demo_settings(
    corpus: DemoCorpus, model: str, generic: list[str], gguf_file: str | None = None, batch_size: int = DEMO_BATCH_SIZE,
) -> dict[str, Any]:
    """The demo's experiment as a config mapping: one dataset per duplication count, the template passages (slot
    words vary across copies), the generic sentence after each of its contexts (`generic`, from `demo_generic`),
    and the held-out control; the training corpus (`write_demo_corpus` writes it before a run) is indexed, so every
    window gets its real count in it. `batch_size`: `demo_batch_size`'s."""
    copies = sorted({p.copies for p in corpus.planted})
    datasets: list[dict[str, Any]] = [
        {"name": f"planted-x{c}", "documents": [p.text for p in corpus.planted if p.copies == c], "duplicates": c} for c in copies
    ]
    datasets.append({"name": f"template-x{len(corpus.templates[0].copies)}", "documents": [t.text for t in corpus.templates]})
    datasets.append({"name": f"generic-x{len(generic)}", "documents": generic})
    datasets.append({"name": "heldout", "documents": list(corpus.heldout), "role": "control"})
    return {
        "model": {"name": model, "gguf_file": gguf_file, "batch_size": batch_size},
        "datasets": datasets,
        "windows": {"mode": "doc", "prefix_length": 50, "suffix_length": 50},
        "policies": DEMO_POLICIES,
        "methods": ["probabilistic", "greedy", "cbs", "prior_aware", "membership", "corpus_counts"],
        "prior_aware": DEMO_PRIOR_AWARE,
        "corpus": {"paths": [str(training_corpus_file(corpus, cache_root() / DEMO_CORPUS_FOLDER))]},
    }
