"""The head screen's product (`linears.ScreenedHead`) against cheaper ones, on the hidden states of a real k-CBS search.

    python benchmarks/head_screen.py [--windows 8] [--every 4]

BLAS's screened head multiplies the whole head approximately (oneDNN, float32), then BLAS's exact columns for each
row's candidates. The approximation may come from any kernel whose error is bounded, so this script times the
candidates on SmolLM2's head with the hidden states of the table's k-CBS (B = 20, top-k 40), each as a ratio to BLAS's
sliced head, best of five alternated rounds: oneDNN's float32 product on the plain weight (the screen's now) and on a
blocked copy (`linears.pack`), and oneDNN's bfloat16 product. For bfloat16 it also prints the rigorous error bound
(input rounding by Cauchy–Schwarz, the output's rounding to bfloat16, float32 accumulation; Higham §3.1) against the
largest true error, and how many rows it certifies with the screen's 53 tokens and with its wider 424, next to the
float32 screen's `HeadScreen.error`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from table import machine
from teacher_forcing import make_windows

import memrisk
from memrisk import DecodingPolicy
from memrisk.models import linears

TOP_K = DecodingPolicy(top_k=40)
BF16_UNIT = 2.0**-8
"""bfloat16's unit roundoff (8 significant bits, round to nearest even)."""


def hidden_states(lm: memrisk.LanguageModel, windows: int) -> list[torch.Tensor]:
    """The rows [rows, hidden] that each screened head product of one k-CBS search over the table's windows saw."""
    seen: list[torch.Tensor] = []
    original = linears.ScreenedHead.forward

    def keep(self: linears.ScreenedHead, hidden: torch.Tensor) -> torch.Tensor:
        seen.append(hidden.reshape(-1, hidden.shape[-1]).detach().clone())
        return original(self, hidden)

    prefixes, suffixes = make_windows(lm, windows)
    linears.ScreenedHead.forward = keep
    try:
        memrisk.cbs(lm, prefixes, suffixes, TOP_K, beam_width=20, prune=None, batch_size=windows, anchor=False)
    finally:
        linears.ScreenedHead.forward = original
    return seen


def best_seconds(products: dict[str, Callable[[torch.Tensor], torch.Tensor]], rows: list[torch.Tensor]) -> dict[str, float]:
    """Each product's best total seconds over `rows`, five rounds alternated so that every product meets the machine alike."""
    best = dict.fromkeys(products, float("inf"))
    with torch.inference_mode():
        for _ in range(5):
            for name, product in products.items():
                start = time.perf_counter()
                for hidden in rows:
                    product(hidden)
                best[name] = min(best[name], time.perf_counter() - start)
    return best


class BFloat16Bound:
    """A bound on |exact logit − bfloat16 product| (float64) for one head weight: input rounding ‖h − bf(h)‖·max‖w‖ +
    ‖bf(h)‖·max‖w − bf(w)‖, float32 accumulation γ_K·‖bf(h)‖·max‖bf(w)‖ (doubled), and the output's rounding to
    bfloat16, up to 2⁻⁸ of the logit (1% spare). The weight's norms are taken once."""

    def __init__(self, weight: torch.Tensor) -> None:
        w, w16 = weight.double(), weight.bfloat16().double()
        self.norm, self.rounding, self.rounded_norm = (float(x.norm(dim=1).max()) for x in (w, w - w16, w16))
        terms = weight.shape[1]
        self.gamma = terms * 2.0**-24 / (1 - terms * 2.0**-24)

    def __call__(self, hidden: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Per row of `hidden` and each of its bfloat16 `logits` [rows, n], the bound at that logit."""
        h, h16 = hidden.double(), hidden.bfloat16().double()
        rounded = h16.norm(dim=1)
        per_row = (h - h16).norm(dim=1) * self.norm + rounded * (self.rounding + 2 * self.gamma * self.rounded_norm)
        return per_row[:, None] + 1.01 * BF16_UNIT * logits.abs()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--every", type=int, default=4, help="check the bounds on every n-th step's rows (default 4)")
    args = parser.parse_args()
    lm = memrisk.load_model("smollm2", batch_size=args.windows)
    head = lm.model.get_output_embeddings()
    weight = head.weight.detach()
    steps = hidden_states(lm, args.windows)
    print(machine() + f"\n{len(steps)} screened head products of {steps[0].shape[0]} rows (k-CBS, B = 20, "
          f"{args.windows} windows)", flush=True)

    sliced, blocked, weight16 = linears.SlicedHead(head), linears.pack(weight), weight.bfloat16()
    best = best_seconds({
        "BLAS sliced head": sliced,
        "oneDNN float32, plain weight (the screen's)": lambda h: linears.onednn_product(h, weight),
        "oneDNN float32, blocked weight": lambda h: linears.onednn_product(h, blocked),
        "oneDNN bfloat16": lambda h: torch.nn.functional.linear(h.bfloat16(), weight16),
    }, steps)
    reference = best["BLAS sliced head"]
    for name, seconds in best.items():
        print(f"  {name}: {seconds / len(steps) * 1e3:.1f} ms a product, {seconds / reference:.2f}x BLAS's", flush=True)

    top = TOP_K.deciding_logits(weight.shape[0])
    assert top is not None
    takes = (top + linears.SCREEN_SPARE, linears.SCREEN_WIDER * (top + linears.SCREEN_SPARE))
    certified = {(kind, take): 0 for kind in ("float32", "bfloat16") for take in takes}
    rows, bounds, errors, gaps, float32_bounds = 0, [], [], [], []
    screen, bound, weight64 = linears.HeadScreen(), BFloat16Bound(weight), weight.double()
    screened = linears.ScreenedHead(head, screen, top)
    with torch.inference_mode():
        for hidden in steps[:: args.every]:
            exact = hidden.double() @ weight64.t()
            approximate = torch.nn.functional.linear(hidden.bfloat16(), weight16).double()
            # the bound grows with |logit|, so ordering by the logits orders their upper and lower bounds alike
            values = approximate.topk(takes[-1], dim=1).values
            value_bound = bound(hidden, values)
            float32 = linears.onednn_product(hidden, weight).topk(takes[-1], dim=1).values
            float32_error = screen.error(hidden, weight)
            for take in takes:
                certified["bfloat16", take] += int((values[:, take - 1] + value_bound[:, take - 1]
                                                    < values[:, top - 1] - value_bound[:, top - 1]).sum())
                certified["float32", take] += int(screened._certified(float32[:, :take], float32_error).sum())
            rows += hidden.shape[0]
            bounds.append(value_bound[:, top - 1].median().item())
            errors.append((approximate - exact).abs().max().item())
            float32_bounds.append(float32_error.median().item())
            largest = exact.topk(takes[0], dim=1).values
            gaps.append((largest[:, top - 1] - largest[:, -1]).median().item())
    print(f"  bfloat16 error bound at a row's logit number {top} (largest first): median {statistics.median(bounds):.3f}; "
          f"largest true error {max(errors):.3f}; float32 screen's bound: median {statistics.median(float32_bounds):.3f}")
    print(f"  a row's logits number {top} and {takes[0]} lie a median {statistics.median(gaps):.3f} apart")
    for (kind, take), count in certified.items():
        print(f"  {kind} screen, {take} tokens: {count} of {rows} rows certified")


if __name__ == "__main__":
    main()
