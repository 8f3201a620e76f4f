"""`compile: true` on SmolLM2-135M: the first and later teacher forcing and CBS, compiled against eager.

    python benchmarks/compile.py [--windows 8] [--rounds 3] [--whole] [--device cpu|cuda]

Each mode runs in its own process with an empty torch.compile cache (a new machine has none): eager, memrisk's
`compile: true` (the layers' norms and MLPs compiled by region, `memrisk/models/regions.py`) and, with `--whole`, the
whole model wrapped in `torch.compile(dynamic=True)`, as memrisk did before (minutes: each layer's attention compiles
apart, docs/performance.md, "Regional compilation"). A round is teacher forcing with two policies, then a Levenshtein
CBS (B = 20, ε = 5, top-40) on the same windows; the first round pays the compilation. The compiled modes' log p and
CBS upper bounds are printed as their largest distance from eager's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

MODES = ("eager", "regions", "whole")


def run_mode(mode: str, windows: int, rounds: int, device: str) -> dict:
    """Time `rounds` rounds of one mode in this process; return the times, log p and CBS upper bounds."""
    from teacher_forcing import make_windows

    import memrisk
    from memrisk import DecodingPolicy

    lm = memrisk.load_model("smollm2", batch_size=windows, device=device, compile=mode == "regions")
    if mode == "whole":
        lm._compiled = torch.compile(lm.model, dynamic=True)
    prefixes, suffixes = make_windows(lm, windows)
    policies = [DecodingPolicy(), DecodingPolicy(top_k=40)]
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        scores = memrisk.verbatim_scores(lm, prefixes, suffixes, policies)
        middle = time.perf_counter()
        searched = memrisk.cbs(lm, prefixes, suffixes, policies[1], beam_width=20, epsilon=5, prune="levenshtein",
                               batch_size=windows)
        times.append((middle - start, time.perf_counter() - middle))
    return {"times": times, "log_p": np.nan_to_num(scores.log_p, neginf=-1e30).tolist(),
            "upper": [s.upper_bound() for s in searched]}


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


if __name__ == "__main__":
    main()
