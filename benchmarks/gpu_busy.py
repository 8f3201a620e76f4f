"""How busy a search keeps the GPU: kernels per decode step and the share of wall time the GPU spends in them.

    python benchmarks/gpu_busy.py [--windows 8] [--compile]

k-CBS (Algorithm 1, B = 20, top-k 40) and transformers' `generate(num_beams=20)` decode the same 50 + 50-token windows
of SmolLM2-135M-Instruct (as `table.py`); each is timed without the profiler (best of three) and profiled once more
(torch.profiler) for its kernel count and the kernels' summed device time. The searches run with either prefix
cache (`model.prefix_cache`: "per_row", the default on a GPU, and "shared", the CPU's), and CBS as the table runs it
(Levenshtein ε = 5, anchored) beside k-CBS. A GPU busy for a small share of the wall
time is bound by launching kernels and the host's Python, not by its arithmetic or its memory: the roofline's terms
(docs/performance.md, GPU) then do not limit the search. `--compile` also times k-CBS with `load_model(compile=True)`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from teacher_forcing import make_windows
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import memrisk
from memrisk import DecodingPolicy

BEAMS, NEW_TOKENS, ROUNDS = 20, 50, 3
TOP_K = DecodingPolicy(top_k=40)


def wall_seconds(fn: Callable[[], object]) -> float:
    """Best wall seconds of ROUNDS calls of `fn`, the GPU's queued work included."""
    times = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def busy_line(name: str, fn: Callable[[], object], steps: int) -> str:
    """`fn`'s best wall time, kernels per decode step, and the GPU's kernel time as a share of the wall time."""
    fn()
    seconds = wall_seconds(fn)
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        fn()
        torch.cuda.synchronize()
    on_device = [event for event in profiler.events() if event.device_type == DeviceType.CUDA]
    kernels, device_s = len(on_device), sum(event.device_time_total for event in on_device) / 1e6
    return (f"{name}: {seconds:.2f} s; {kernels / steps:,.0f} kernels per decode step; GPU busy {device_s:.2f} s "
            f"= {device_s / seconds:.0%} of the wall time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=8, help="windows, also the batch in sequences (default 8)")
    parser.add_argument("--compile", action="store_true", help="also time k-CBS with load_model(compile=True)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_busy.py measures a GPU; torch sees none")
    lm = memrisk.load_model("smollm2", batch_size=args.windows, device="cuda")
    prefixes, suffixes = make_windows(lm, args.windows)
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; {args.windows} windows, B = {BEAMS}", flush=True)

    def k_cbs(model: memrisk.LanguageModel) -> Callable[[], object]:
        return lambda: memrisk.cbs(model, prefixes, suffixes, TOP_K, beam_width=BEAMS, prune=None,
                                   batch_size=args.windows, anchor=False)

    def generate() -> None:
        ids = torch.tensor(prefixes, device=lm.device)
        with torch.inference_mode():
            lm.model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=BEAMS, max_new_tokens=NEW_TOKENS,
                              min_new_tokens=NEW_TOKENS, do_sample=False, early_stopping=False, length_penalty=0.0,
                              pad_token_id=lm.eos_token_id)

    def levenshtein_cbs() -> object:
        return memrisk.cbs(lm, prefixes, suffixes, TOP_K, beam_width=BEAMS, prune="levenshtein", epsilon=5,
                           batch_size=args.windows)

    for cache in ("per_row", "shared"):  # "auto", the default, is per_row on a GPU (shared_prefix.chosen)
        lm.use_prefix_cache(cache)
        print("  " + busy_line(f"k-CBS, prefix_cache {cache}", k_cbs(lm), NEW_TOKENS), flush=True)
        print("  " + busy_line(f"CBS (Levenshtein, eps = 5, anchored), prefix_cache {cache}", levenshtein_cbs, NEW_TOKENS),
              flush=True)
    lm.use_prefix_cache("auto")
    print("  " + busy_line(f"generate(num_beams={BEAMS})", generate, NEW_TOKENS), flush=True)
    if args.compile:
        compiled = memrisk.load_model("smollm2", batch_size=args.windows, device="cuda", compile=True)
        start = time.perf_counter()
        k_cbs(compiled)()
        print(f"  compiling k-CBS's forwards took {time.perf_counter() - start:.0f} s", flush=True)
        print("  " + busy_line("k-CBS, compile=True", k_cbs(compiled), NEW_TOKENS), flush=True)


if __name__ == "__main__":
    main()
