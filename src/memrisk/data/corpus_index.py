"""An index of a training corpus in the model's own token ids, counting how often a token sequence occurs in it.

The documents are tokenised here with the model's tokenizer; each id is replaced by its rank among the ids the corpus
uses (`token-ids.npy`), so that any vocabulary fits infini-gram's 2-byte layout while the corpus uses fewer than 65,535
distinct ids. The ranks are written in infini-gram's layout (`tokenized.0`: each document after a separator that no rank
has, so no n-gram spans two documents; `offset.0`: where each document starts); infini-gram's indexer sorts their suffix
array (`table.0`) and its engine counts any n-gram by binary search in it, exactly, overlapping occurrences included
(Liu et al., 2024, infini-gram). An index is kept in memrisk's
cache, keyed by the documents and the tokenizer, built whole or not at all, and records the tokenizer it was built with:
opening it with another is refused (docs/corpus_counts.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import resource
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from memrisk.cache import cache_root, save_atomically
from memrisk.errors import MemriskError
from memrisk.models.backend import LanguageModel

INDEX_INFO = "memrisk-index.json"
"""The index's own record: the tokenizer it was built with, the documents' digest, sizes and the token width."""
ENGINE_FILES = ("tokenized.0", "offset.0", "table.0")
"""infini-gram's files of a one-shard index: the token ids, the document offsets and the suffix array."""
ALPHABET = "token-ids.npy"
"""The model's token ids the corpus uses, sorted: rank r in the index stands for id ALPHABET[r]."""
CACHE_FOLDER = "corpus-index"
U16_LIMIT = 2**16 - 1
"""Ranks below this fit infini-gram's 2-byte layout, whose separator is 0xFFFF; a corpus with more distinct ids takes 4."""
U32_MEMORY = 40 * 2**30
"""Memory infini-gram's 4-byte indexer needs: it allocates 32 GiB of buckets, one per possible id, whatever the corpus."""


def corpus_digest(texts: Sequence[str]) -> str:
    """SHA-256 of the documents' texts in order: the index's content key."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    return digest.hexdigest()


@dataclass(frozen=True)
class CorpusIndex:
    """A built index, opened read-only: where it is and what it holds. Picklable (the engine is opened per process)."""

    folder: Path
    tokenizer_model: str
    tokenizer_fingerprint: str
    corpus_sha256: str
    documents: int
    tokens: int
    token_width: int
    distinct_ids: int

    def count(self, ids: Sequence[int]) -> int:
        """How many times the token sequence occurs in the corpus (overlapping occurrences each count; none spans two
        documents). An id the corpus never uses occurs nowhere."""
        engine, alphabet = _engine(str(self.folder), self.token_width, self.distinct_ids)
        query = np.asarray(ids, dtype=np.int64)
        ranks = np.minimum(np.searchsorted(alphabet, query), len(alphabet) - 1)
        if not np.array_equal(alphabet[ranks], query):
            return 0
        answer = engine.count([int(r) for r in ranks])
        if "error" in answer:
            raise MemriskError(f"the corpus index {self.folder} cannot count {len(query)} tokens: {answer['error']}")
        return int(answer["count"])

    def info(self) -> dict[str, Any]:
        """What the index holds, as saved in it and next to a run's records."""
        return {
            "folder": str(self.folder),
            "engine": "infini-gram",
            "tokenizer": {"model": self.tokenizer_model, "fingerprint": self.tokenizer_fingerprint},
            "corpus_sha256": self.corpus_sha256,
            "documents": self.documents,
            "tokens": self.tokens,
            "token_width": self.token_width,
            "distinct_ids": self.distinct_ids,
        }


@functools.cache
def _engine(folder: str, token_width: int, distinct_ids: int) -> tuple[Any, np.ndarray]:
    """infini-gram's engine over one index and the ids its ranks stand for, opened once per process (the engine maps
    the files, it does not read them)."""
    from infini_gram.engine import InfiniGramEngine

    engine = InfiniGramEngine(index_dir=folder, eos_token_id=0, vocab_size=distinct_ids, token_dtype=f"u{8 * token_width}")
    return engine, np.load(Path(folder) / ALPHABET)


def cached_index_folder(digest: str, lm: LanguageModel) -> Path:
    """Where the index of these documents under this model's tokenizer is kept in memrisk's cache."""
    return cache_root() / CACHE_FOLDER / f"{digest[:16]}-{lm.tokenizer_fingerprint[:16]}"


def open_corpus_index(
    lm: LanguageModel, texts: Sequence[str] | None, index_dir: str | Path | None = None, *, progress: bool = True,
) -> CorpusIndex:
    """The index of `texts` under `lm`'s tokenizer: opened where it exists (in the cache, or `index_dir`), else built
    there first. An index built with another tokenizer, or from other documents, is refused."""
    digest = corpus_digest(texts) if texts is not None else None
    if index_dir is None:
        if digest is None:
            raise MemriskError("a corpus index needs its documents or an index_dir")
        folder = cached_index_folder(digest, lm)
    else:
        folder = Path(index_dir).expanduser().resolve()
    if not folder.exists():
        if texts is None:
            raise MemriskError(f"corpus index_dir {folder} does not exist, and the corpus names no documents to build it from")
        save_atomically(folder, lambda staging: _build(staging, lm, texts, digest, progress))
    return _opened(folder, lm, digest)


def _opened(folder: Path, lm: LanguageModel, digest: str | None) -> CorpusIndex:
    """The index in `folder`, checked against the model's tokenizer and (when known) the documents' digest."""
    info_path = folder / INDEX_INFO
    missing = [name for name in (INDEX_INFO, ALPHABET, *ENGINE_FILES) if not (folder / name).is_file()]
    if missing:
        raise MemriskError(f"{folder} holds no complete corpus index (missing {', '.join(missing)}); remove it or name "
                           "another index_dir")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    built_with, fingerprint = info["tokenizer"], lm.tokenizer_fingerprint
    if built_with["fingerprint"] != fingerprint:
        raise MemriskError(
            f"the corpus index {folder} was built with the tokenizer of {built_with['model']} (fingerprint "
            f"{built_with['fingerprint'][:12]}), but the model {lm.name} has another (fingerprint {fingerprint[:12]}): "
            "its counts would be of other token ids; index the corpus with this model's tokenizer (another index_dir)"
        )
    if digest is not None and info["corpus_sha256"] != digest:
        raise MemriskError(
            f"the corpus index {folder} was built from other documents (sha256 {info['corpus_sha256'][:12]}) than the "
            f"corpus names (sha256 {digest[:12]}); remove it or name another index_dir"
        )
    return CorpusIndex(folder, built_with["model"], built_with["fingerprint"], info["corpus_sha256"], info["documents"],
                       info["tokens"], info["token_width"], info["distinct_ids"])


def _build(staging: Path, lm: LanguageModel, texts: Sequence[str], digest: str, progress: bool) -> None:
    """Tokenise the documents into infini-gram's layout in `staging`, sort their suffix array, then record the index."""
    with tqdm(total=len(texts) + 1, desc="indexing corpus", unit="doc", disable=not progress) as bar:
        encoded = []
        for text in texts:
            encoded.append(np.asarray(lm.encode(text), dtype=np.int64))
            bar.update(1)
        tokens = sum(len(ids) for ids in encoded)
        if not tokens:
            raise MemriskError(f"the corpus ({len(texts)} documents) encodes to no tokens under the tokenizer of {lm.name}")
        alphabet = np.unique(np.concatenate(encoded))
        width = 2 if len(alphabet) <= U16_LIMIT else 4
        if width == 4 and physical_memory() < U32_MEMORY:
            raise MemriskError(
                f"the corpus uses {len(alphabet):,} distinct token ids, more than infini-gram's 2-byte index holds "
                f"({U16_LIMIT:,}); its 4-byte indexer needs {U32_MEMORY // 2**30} GiB of memory and this machine has "
                f"{physical_memory() // 2**30} GiB (docs/corpus_counts.md)"
            )
        np.save(staging / ALPHABET, alphabet)
        _write_tokens(staging, [np.searchsorted(alphabet, ids) for ids in encoded], width)
        bar.set_postfix_str("suffix array")
        _sort_suffixes(staging, width)
        bar.update(1)
    info = CorpusIndex(staging, str(lm.name), lm.tokenizer_fingerprint, digest, len(texts), tokens, width, len(alphabet)).info()
    info = {key: value for key, value in info.items() if key != "folder"} | {"engine_version": metadata.version("infini-gram")}
    (staging / INDEX_INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")


def _write_tokens(staging: Path, encoded: Sequence[np.ndarray], width: int) -> None:
    """`tokenized.0` (separator, then the document's ranks, little-endian) and `offset.0` (each document's byte offset)."""
    dtype = np.dtype(f"<u{width}")
    separator = np.array([2 ** (8 * width) - 1], dtype=dtype).tobytes()
    offsets, position = [], 0
    with open(staging / ENGINE_FILES[0], "wb") as out:
        for ids in encoded:
            offsets.append(position)
            data = separator + ids.astype(dtype).tobytes()
            out.write(data)
            position += len(data)
    (staging / ENGINE_FILES[1]).write_bytes(np.asarray(offsets, dtype="<u8").tobytes())


def physical_memory() -> int:
    """Bytes of memory this machine has."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def sorting_jobs(size: int) -> int:
    """Parallel jobs for infini-gram's suffix sort of `size` bytes: one per core only when every part is well past the
    overlap its parts share (`HACK` bytes); a smaller corpus split in parts is sorted with suffixes counted twice."""
    from infini_gram.indexing import HACK

    cores = os.cpu_count() or 1
    return cores if size >= 4 * cores * HACK else 1


def _sort_suffixes(staging: Path, width: int) -> None:
    """infini-gram's indexer on the written ids (its tokenising step finds them there and is skipped): `table.0`."""
    soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    memory_gib = max(1, physical_memory() // 2**31)
    command = [sys.executable, "-m", "infini_gram.indexing", "--data_dir", str(staging), "--save_dir", str(staging),
               "--token_dtype", f"u{8 * width}", "--cpus", str(sorting_jobs((staging / ENGINE_FILES[0]).stat().st_size)),
               "--mem", str(memory_gib), "--ulimit", str(soft_limit)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise MemriskError(f"infini-gram's indexer could not start: {exc}") from exc
    if done.returncode != 0 or not (staging / ENGINE_FILES[2]).is_file():
        output = (done.stdout + done.stderr).strip().splitlines()
        raise MemriskError(f"infini-gram's indexer failed (exit {done.returncode}): {' / '.join(output[-3:]) or 'no output'}")
