"""Regional compilation: the parts of a model's repeated layers compiled once for all layers (`compile: true`).

Compiling a whole transformers model traces each attention layer apart, because each carries its `layer_idx` as a
constant: a model of more than eight layers hits torch.compile's recompile limit, and SmolLM2's first forward took
minutes. Compiled part by part, one graph per kind of part serves every layer, and the attention, which writes
memrisk's caches at lengths that change every step, stays eager (docs/scaling.md, docs/performance.md)."""

from __future__ import annotations

import copy
import itertools

import torch

from memrisk.errors import MemriskError


def compiled_regions(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` that shares its weights, buffers and configs, with every part of its layer stack that holds
    no `layer_idx` (norms, MLPs) compiled with `torch.compile(dynamic=True)`. `model` itself is not changed; the shared
    configs let per-forward switches set on it (the attention kernel) reach the copy."""
    regions = sharing_copy(model, configs=True)
    for layer in layer_stack(regions):
        for part in layer.children():
            if not any(hasattr(module, "layer_idx") for module in part.modules()):
                part.compile(dynamic=True)
    return regions


def sharing_copy(model: torch.nn.Module, *, configs: bool = False) -> torch.nn.Module:
    """A deep copy of `model` whose parameters and buffers are `model`'s own tensors (no weight is copied), and with
    `configs` its config objects too; its modules are its own (`compiled_regions`, `LanguageModel.replicas`)."""
    shared: dict[int, object] = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    if configs:
        shared.update({id(m.config): m.config for m in model.modules() if getattr(m, "config", None) is not None})
    return copy.deepcopy(model, shared)


def layer_stack(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's repeated layers: its largest `ModuleList` by parameter count (`model.layers` of Llama, `transformer.h`
    of GPT-2); a model without one is an error naming it."""
    stacks = [module for module in model.modules() if isinstance(module, torch.nn.ModuleList)]
    if not stacks:
        raise MemriskError(f"compile: true compiles a model's layers one kind at a time, and {type(model).__name__} has "
                           "no list of layers; load it without compile")
    return max(stacks, key=lambda stack: sum(p.numel() for p in stack.parameters()))
