"""`compile: true` on SmolLM2-135M: the first and later teacher forcing and CBS, compiled against eager.

    python benchmarks/compile.py [--windows 8] [--rounds 3] [--whole] [--device cpu|cuda]

Each mode runs in its own process with an empty torch.compile cache (a new machine has none): eager, memrisk's
`compile: true` (the layers' norms and MLPs compiled by region, `memrisk/models/regions.py`) and, with `--whole`, the
whole model wrapped in `torch.compile(dynamic=True)`, as memrisk did before (minutes: each layer's attention compiles
apart, docs/performance.md, "Regional compilation"). A round is teacher forcing with two policies, then a Levenshtein
CBS (B = 20, ε = 5, top-40) on the same windows; the first round pays the compilation. The compiled modes' log p and
CBS upper bounds are printed as their largest distance from eager's, and each mode's peak memory in its later rounds
(the first also holds the compiler's) next to weights + KV cache + logits and to what `batch_size: auto` budgets
(`measure.memory_line`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

MODES = ("eager", "regions", "whole")
BEAMS = 20


def run_mode(mode: str, windows: int, rounds: int, device: str) -> dict:
    """Time `rounds` rounds of one mode in this process; return the times, log p, CBS upper bounds and memory lines."""
    from measure import measured, memory_line
    from teacher_forcing import make_windows

    import memrisk
    from memrisk import DecodingPolicy

    lm = memrisk.load_model("smollm2", batch_size=windows, device=device, compile=mode == "regions")
    if mode == "whole":
        lm._compiled = torch.compile(lm.model, dynamic=True)
    prefixes, suffixes = make_windows(lm, windows)
    policies = [DecodingPolicy(), DecodingPolicy(top_k=40)]
    times, peaks = [], []
    for _ in range(rounds):
        scores, forced_s, forced_peak = measured(lambda: memrisk.verbatim_scores(lm, prefixes, suffixes, policies))
        searched, search_s, search_peak = measured(lambda: memrisk.cbs(
            lm, prefixes, suffixes, policies[1], beam_width=BEAMS, epsilon=5, prune="levenshtein", batch_size=windows))
        times.append((forced_s, search_s))
        peaks.append((forced_peak, search_peak))
    steady = peaks[1:] or peaks
    tokens, scored = max(len(p) + len(s) for p, s in zip(prefixes, suffixes)), max(len(s) for s in suffixes)
    memory = (f"teacher forcing {memory_line(lm, max(p[0] for p in steady), windows, tokens, scored)}; "
              f"CBS {memory_line(lm, max(p[1] for p in steady), windows * (BEAMS + 1), tokens, 1)}")
    return {"times": times, "log_p": np.nan_to_num(scores.log_p, neginf=-1e30).tolist(),
            "upper": [s.upper_bound() for s in searched], "memory": memory}


def in_process(mode: str, windows: int, rounds: int, device: str) -> dict:
    """`run_mode` in a fresh Python with its own empty compile cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        command = [sys.executable, __file__, "--child", mode, "--windows", str(windows), "--rounds", str(rounds),
                   "--device", device]
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8, help="50 + 50 token windows, one batch (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode, the first one compiling (default 3)")
    parser.add_argument("--whole", action="store_true", help="also time the whole model compiled (minutes)")
    parser.add_argument("--device", default="cpu", help="where the model runs (default cpu)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_mode(args.child, args.windows, args.rounds, args.device)))
        return
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {torch.get_num_threads()} threads"
    print(f"SmolLM2-135M on {where}, {args.windows} windows, {args.rounds} rounds a mode")
    results = {mode: in_process(mode, args.windows, args.rounds, args.device) for mode in MODES if mode != "whole" or args.whole}
    eager = results["eager"]
    best = [min(t[i] for t in eager["times"][1:] or eager["times"]) for i in (0, 1)]
    for mode, result in results.items():
        (first_tf, first_cbs), later = result["times"][0], result["times"][1:]
        line = f"{mode:8s} first: teacher forcing {first_tf:7.2f} s, CBS {first_cbs:7.2f} s"
        if later:
            tf, cbs = min(t[0] for t in later), min(t[1] for t in later)
            line += f"; later (best): {tf:.2f} s = {tf / best[0]:.2f}x eager, {cbs:.2f} s = {cbs / best[1]:.2f}x eager"
        if mode != "eager":
            log_p = np.abs(np.subtract(result["log_p"], eager["log_p"])).max()
            upper = np.abs(np.subtract(result["upper"], eager["upper"])).max()
            line += f"; |log p - eager| <= {log_p:.1e}, |upper bound - eager| <= {upper:.1e}"
        print(line)
        print(f"{'':8s} memory{' (first round)' if not later else ''}: {result['memory']}")


if __name__ == "__main__":
    main()
