"""Train (or load from cache) the demo's ground-truth model on the demo corpus."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from memrisk.cache import cache_root, save_atomically
from memrisk.demo.corpus import DemoCorpus
from memrisk.errors import MemriskError
from memrisk.models import allocator

EOS_TOKEN = "<|endoftext|>"


@dataclass(frozen=True)
class TrainingConfig:
    """Hyper-parameters of the demo tokenizer and model; part of the cache key. The defaults are `small`: two layers
    (at this scale they memorize as much per step as four, for 60% of the compute) and 1,000 steps of 2 × 256 tokens
    (1.9 epochs)."""

    vocab_size: int = 4096
    hidden_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 768
    block_size: int = 256
    batch_size: int = 2
    steps: int = 1000
    learning_rate: float = 1e-3
    warmup_steps: int = 60
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    grad_clip: float = 1.0


SIZES: dict[str, TrainingConfig] = {
    "small": TrainingConfig(),
    "base": TrainingConfig(num_layers=4),
}
"""The demo's model sizes: the same corpus, tokenizer (one `vocab_size`) and training schedule; `base` has twice the
layers and 1.6× the parameters of `small` (4.5M against 2.8M), so that the model-size figures (CBS Figs. 4, 20; (n,p)
Fig. 5; PA Fig. 4) compare them."""
DEFAULT_SIZE = "small"


def training_config(size: str) -> TrainingConfig:
    """The hyper-parameters of a demo model size; an unknown size is an error naming the known ones."""
    if size not in SIZES:
        raise MemriskError(f"unknown demo model size {size!r}; the sizes are {', '.join(SIZES)}")
    return SIZES[size]


def default_cache_dir() -> Path:
    """Return ``$MEMRISK_CACHE/demo``, or ``~/.cache/memrisk/demo`` when the variable is unset."""
    return cache_root() / "demo"


def train_demo_model(
    corpus: DemoCorpus,
    cache_dir: Path | None = None,
    seed: int = 0,
    progress: bool = True,
    *,
    config: TrainingConfig = TrainingConfig(),
) -> Path:
    """Train the demo model and tokenizer, returning the cached save_pretrained directory."""
    target = cached_model_dir(corpus, seed, config, cache_dir)
    if not target.is_dir():
        save_atomically(target, lambda staging: _train_into(staging, corpus, seed, progress, config))
    return target


def cached_model_dir(corpus: DemoCorpus, seed: int, config: TrainingConfig, cache_dir: Path | None = None) -> Path:
    """Where `train_demo_model` keeps the model of this corpus, seed and config (it exists once trained)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / _cache_key(corpus, seed, config)


def skeleton_model(tokenizer: PreTrainedTokenizerFast, config: TrainingConfig) -> LlamaForCausalLM:
    """The model `config` trains, built on the meta device: its shape and parameter count with no weights (`--dry-run`)."""
    with torch.device("meta"):
        return _build_model(tokenizer, config)


def train_tokenizer(documents: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with EOS as its only special token and no BOS."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)


def _cache_key(corpus: DemoCorpus, seed: int, config: TrainingConfig) -> str:
    """Return the cache directory name: corpus fingerprint plus a hash of seed and hyper-parameters."""
    settings = json.dumps({"seed": seed, **dataclasses.asdict(config)}, sort_keys=True)
    return f"{corpus.fingerprint()[:16]}-{hashlib.sha256(settings.encode()).hexdigest()[:16]}"


def _train_into(directory: Path, corpus: DemoCorpus, seed: int, progress: bool, config: TrainingConfig) -> None:
    """Train tokenizer and model with fixed seeds and save both into ``directory``."""
    allocator.keep_freed_memory()
    _seed_everything(seed)
    tokenizer = train_tokenizer(corpus.training_documents, config.vocab_size)
    model = train_model(corpus.training_documents, tokenizer, config, seed=seed, progress=progress)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def train_model(
    documents: list[str], tokenizer: PreTrainedTokenizerFast, config: TrainingConfig, *, seed: int = 0,
    progress: bool = True,
) -> LlamaForCausalLM:
    """Train a fresh, seeded small Llama-style model on `documents` (no caching), e.g. for studies
    that train many models on variations of a corpus with one shared tokenizer."""
    _seed_everything(seed)
    blocks = _pack_blocks(tokenizer, documents, config.block_size)
    model = _build_model(tokenizer, config)
    _fit(model, blocks, config, seed, progress)
    return model


def _seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch random number generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _pack_blocks(tokenizer: PreTrainedTokenizerFast, documents: list[str], block_size: int) -> torch.Tensor:
    """Tokenize each document on its own, join them with EOS and cut into fixed-length blocks."""
    encoded = tokenizer(documents, add_special_tokens=False)["input_ids"]
    stream = [token for ids in encoded for token in (*ids, tokenizer.eos_token_id)]
    count = len(stream) // block_size
    return torch.tensor(stream[: count * block_size], dtype=torch.long).view(count, block_size)


def _build_model(tokenizer: PreTrainedTokenizerFast, config: TrainingConfig) -> LlamaForCausalLM:
    """Create a freshly initialised small Llama-style causal language model."""
    eos = tokenizer.eos_token_id
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.block_size,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    return LlamaForCausalLM(model_config)


def _batches(blocks: torch.Tensor, batch_size: int, seed: int) -> Iterator[torch.Tensor]:
    """Yield batches of blocks forever, reshuffling the block order every epoch."""
    if len(blocks) < batch_size:
        raise ValueError(f"corpus yields {len(blocks)} blocks, fewer than one batch of {batch_size}")
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(blocks), generator=generator)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield blocks[order[start : start + batch_size]]


def _lr_factor(step: int, config: TrainingConfig) -> float:
    """Return the learning-rate multiplier: linear warm-up, then cosine decay to min_lr_ratio."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _fit(model: LlamaForCausalLM, blocks: torch.Tensor, config: TrainingConfig, seed: int, progress: bool) -> None:
    """Run AdamW next-token training for ``config.steps`` steps."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(0.9, 0.95), weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, config))
    batches = _batches(blocks, config.batch_size, seed)
    model.train()
    with tqdm(range(config.steps), desc="training", disable=not progress) as bar:
        for _ in bar:
            batch = next(batches)
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
