"""Throughput of teacher-forced scoring (`memrisk.verbatim_scores`) against a bare forward pass.

Loads the pretrained SmolLM2-135M-Instruct (`memrisk.load_model("smollm2")`), cuts N windows of
50 prefix + 50 suffix tokens from standard-library docstrings (one token list, never
re-tokenised), and times, on exactly the same batches:

  (a) forward     the model's bare forward pass, `lm.model(input_ids)` under
                  `torch.inference_mode()`, no post-processing (logits at every position,
                  whereas `verbatim_scores` asks only for the 51 it needs, so (b)/(a) can
                  exceed 1.0: the output projection is ~20% of this model's FLOPs);
  (b) 1 policy    `verbatim_scores` with top-k 40;
  (c) 4 policies  `verbatim_scores` with top-k 40, full softmax, temperature 0.7 + top-k 40
                  and top-p 0.9.

Repetitions are interleaved (a, b, c, then b, c, a, ...) so that noise from other work on the
machine hits every variant alike; windows/s is reported from the median and from the best
(fastest) run of each variant, with (b)/(a) and (c)/(a) in throughput terms (1.0 = as fast as
the bare forward; the target for 4 policies is >= 0.85). Noise only ever adds time, so on a
shared machine the best-run ratios are the steadier ones; better still, check that the machine
is otherwise idle (`ps aux --sort=-%cpu | head`) before trusting the numbers. Each variant's peak memory is printed
next to weights + KV cache + logits of a batch and to what `batch_size: auto` budgets for it (`measure.memory_line`).

Run:  python benchmarks/teacher_forcing.py [--windows N] [--batch-size B] [--repeats R] [--threads T]

(--threads 1 gives steadier numbers when another process is busy on the same cores.)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import statistics

import torch
from measure import measured, memory_line

import memrisk
from memrisk import DecodingPolicy
from memrisk.models.throughput import device_peak_flops, utilization_line

PREFIX_TOKENS = 50
SUFFIX_TOKENS = 50
DOC_MODULES = (
    "argparse", "collections", "json", "logging", "pathlib", "subprocess", "unittest", "functools",
    "itertools", "textwrap", "re", "string", "heapq", "bisect", "contextlib", "dataclasses",
    "typing", "datetime", "decimal", "fractions",
)


def docstring_text() -> str:
    """Module, class and function docstrings of a fixed list of standard-library modules."""
    parts = []
    for module_name in DOC_MODULES:
        module = importlib.import_module(module_name)
        parts.append(inspect.getdoc(module) or "")
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                parts.append(inspect.getdoc(obj) or "")
    return "\n\n".join(p for p in parts if p)


def make_windows(
    lm: memrisk.LanguageModel, n: int, prefix: int = PREFIX_TOKENS, suffix: int = SUFFIX_TOKENS
) -> tuple[list[list[int]], list[list[int]]]:
    """n consecutive, non-overlapping prefix + suffix token windows (50 + 50 by default) sliced from one token list."""
    ids = lm.encode(docstring_text())
    width = prefix + suffix
    if len(ids) < n * width:
        raise SystemExit(f"only {len(ids)} tokens of docstrings: at most {len(ids) // width} windows")
    starts = range(0, n * width, width)
    return [ids[s:s + prefix] for s in starts], [ids[s + prefix:s + width] for s in starts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=32, help="number of 50+50 token windows (default 32)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per forward pass (default 8)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions of each variant (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    lm = memrisk.load_model("smollm2", batch_size=args.batch_size)
    prefixes, suffixes = make_windows(lm, args.windows)
    # The bare forward gets exactly the batches verbatim_scores builds (BOS ‖ prefix ‖ suffix).
    batches = [
        lm._input_batch([p + s for p, s in zip(prefixes[i:i + args.batch_size], suffixes[i:i + args.batch_size])])[0]
        for i in range(0, len(prefixes), args.batch_size)
    ]

    def bare_forward() -> None:
        with torch.inference_mode():
            for input_ids in batches:
                lm.model(input_ids)

    one_policy = [DecodingPolicy(top_k=40)]
    four_policies = [
        DecodingPolicy(top_k=40),
        DecodingPolicy(),
        DecodingPolicy(temperature=0.7, top_k=40),
        DecodingPolicy(top_p=0.9),
    ]
    variants = {
        "(a) bare forward": bare_forward,
        "(b) verbatim_scores, 1 policy": lambda: memrisk.verbatim_scores(lm, prefixes, suffixes, one_policy),
        "(c) verbatim_scores, 4 policies": lambda: memrisk.verbatim_scores(lm, prefixes, suffixes, four_policies),
    }
    names = list(variants)
    print(
        f"{args.windows} windows of {PREFIX_TOKENS}+{SUFFIX_TOKENS} tokens, batch size {args.batch_size}, "
        f"{len(batches)} batches, {torch.get_num_threads()} torch threads, device {lm.device}"
    )
    for name in names:  # warm-up, untimed
        variants[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    peaks = dict.fromkeys(names, 0)
    for rep in range(args.repeats):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            _, seconds, peak = measured(variants[name])
            times[name].append(seconds)
            peaks[name] = max(peaks[name], peak)

    median = {name: args.windows / statistics.median(times[name]) for name in names}
    best = {name: args.windows / min(times[name]) for name in names}
    for name in names:
        spread = ", ".join(f"{t:.2f}" for t in times[name])
        print(f"{name:34s} {median[name]:7.2f} windows/s median, {best[name]:7.2f} best   (runs in s: {spread})")
    for label, variant in (("(b)/(a)", names[1]), ("(c)/(a)", names[2])):
        print(
            f"ratio {label}: {median[variant] / median[names[0]]:.3f} on medians, "
            f"{best[variant] / best[names[0]]:.3f} on best runs"
        )
    print("(1.0 = as fast as the bare forward; target for 4 policies >= 0.85)")
    tokens = PREFIX_TOKENS + SUFFIX_TOKENS + 1
    for name, scored in zip(names, (tokens, SUFFIX_TOKENS + 1, SUFFIX_TOKENS + 1)):  # the bare forward keeps every position's logits
        print(f"memory, {name}: {memory_line(lm, peaks[name], len(batches[0]), tokens, scored)}")
    token_evals = sum(int(b.numel()) for b in batches)
    parameters = sum(p.numel() for p in lm.model.parameters())
    peak = device_peak_flops(lm.device)
    print("(c) " + utilization_line(token_evals, parameters, statistics.median(times[names[2]]), peak))


if __name__ == "__main__":
    main()
