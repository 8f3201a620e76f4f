"""Decoding policies: the one implementation of temperature, top-k and top-p.

Both scoring (log-probability of a given token) and sampling go through
`DecodingPolicy.log_probs`, so the distribution that is scored is exactly the one
that is sampled. Order follows Hugging Face generation: temperature, then top-k,
then top-p, then renormalisation. All maths is in float32 log space; tokens outside
the kept set get log-probability -inf, never NaN.

Tie rule: when several logits tie at the k-th largest value (top-k) or at the nucleus
boundary (top-p), the tokens with the lower token id are kept first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from memrisk import defaults
from memrisk.errors import MemriskError

NUCLEUS_SEARCH = 256
LARGEST_BLOCK = 64
"""Ids per block in `largest`'s search: on SmolLM2's 49,152 logits at 160 rows, its 41 largest took 2.3 ms this way
and 4.5 ms by one top-k over each row (2 threads; blocks of 32 or 128 ids 2.7 ms)."""


def largest(values: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `count` largest of each row of `values` [..., V], descending, and ids holding them: `torch.topk`'s values,
    with ids that may differ from its own only among equal values.

    Where the vocabulary splits into at least 4 × `count` blocks of `LARGEST_BLOCK` ids, they are sought in the
    `count` blocks with the largest maxima: with t the `count`-th largest maximum, every value above t lies in one of
    those blocks and their maxima are `count` values of at least t, so the `count` largest values are among them."""
    vocab = values.shape[-1]
    blocks = vocab // LARGEST_BLOCK
    if vocab % LARGEST_BLOCK or blocks < 4 * count:
        top = torch.topk(values, count, dim=-1)
        return top.values, top.indices
    blocks_of_rows = values.reshape(-1, blocks, LARGEST_BLOCK)
    chosen = torch.topk(blocks_of_rows.amax(dim=-1), count, dim=-1).indices
    candidates = blocks_of_rows.gather(1, chosen.unsqueeze(-1).expand(-1, -1, LARGEST_BLOCK)).view(len(blocks_of_rows), -1)
    top = torch.topk(candidates, count, dim=-1)
    ids = chosen.gather(1, top.indices // LARGEST_BLOCK) * LARGEST_BLOCK + top.indices % LARGEST_BLOCK
    return top.values.view(*values.shape[:-1], count), ids.view(*values.shape[:-1], count)


def at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """Logits in float32, or float64 when they already are (a float64 model stays exact)."""
    return logits if logits.dtype == torch.float64 else logits.float()


@dataclass(frozen=True)
class DecodingPolicy:
    """A decoding policy φ: temperature β, then top-k, then top-p (nucleus)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)) or self.temperature <= 0:
            raise MemriskError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise MemriskError(f"top_k must be an integer >= 1 (or None), got {self.top_k!r}")
        if self.top_p is not None and not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            raise MemriskError(f"top_p must be in (0, 1] (or None), got {self.top_p!r}")

    @classmethod
    def greedy(cls) -> DecodingPolicy:
        """Greedy decoding: top-k with k = 1 (temperature is immaterial)."""
        return cls(temperature=1.0, top_k=1)

    @property
    def is_greedy(self) -> bool:
        """True when the policy keeps exactly one token per step."""
        return self.top_k == 1

    @property
    def name(self) -> str:
        """A short stable name, e.g. 'topk40' or 'temp0.7-topp0.9'; 'full' for plain sampling."""
        if self.is_greedy:
            return "greedy"
        parts = []
        if self.temperature != 1.0:
            parts.append(f"temp{self.temperature:g}")
        if self.top_k is not None:
            parts.append(f"topk{self.top_k}")
        if self.top_p is not None and self.top_p < 1.0:
            parts.append(f"topp{self.top_p:g}")
        return "-".join(parts) or "full"

    def _scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits in float32 (float64 kept) divided by the temperature (greedy ignores it)."""
        scaled = at_least_float32(logits)
        if not self.is_greedy and self.temperature != 1.0:
            scaled = scaled / self.temperature
        return scaled

    def _k(self, vocab: int) -> int:
        """Number of tokens top-k keeps (the whole vocabulary without top-k)."""
        return vocab if self.top_k is None else min(self.top_k, vocab)

    @property
    def _nucleus(self) -> bool:
        """Whether top-p truncation applies."""
        return self.top_p is not None and self.top_p < 1.0 and not self.is_greedy

    def deciding_logits(self, vocab: int) -> int | None:
        """How many of a row's largest logits decide `top_children`, `score` and `sample`: k + 1 for a plain top-k
        policy (the (k + 1)-th tells a tie at the k-th place), whatever the smaller logits are, as long as they stay
        below those; None where the whole distribution counts (a nucleus, or no top-k)."""
        k = self._k(vocab)
        return k + 1 if k < vocab and not self._nucleus else None

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Policy log-probabilities over the last axis (float32; -inf outside the kept set)."""
        scaled = self._scaled(logits)
        k = self._k(scaled.shape[-1])
        if k < scaled.shape[-1]:
            normaliser = torch.logsumexp(torch.topk(scaled, k, dim=-1).values, dim=-1, keepdim=True)
            scaled = scaled.masked_fill(~top_k_mask(scaled, k), float("-inf"))
        else:
            normaliser = torch.logsumexp(scaled, dim=-1, keepdim=True)
        log_p = scaled - normaliser
        if self._nucleus:
            kept = top_p_mask(log_p, self.top_p)
            log_p = log_p.masked_fill(~kept, float("-inf"))
            log_p = log_p - torch.logsumexp(log_p, dim=-1, keepdim=True)
        return log_p

    def top_children(
        self, logits: torch.Tensor, width: int, within: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The `width` most likely kept tokens of each row: log-probabilities (descending, ties to
        lower ids), token ids, and each row's kept-set size. The numbers of `log_probs`; a plain
        top-k policy gets them from one top-k pass, without the full distribution, over each row's ids `within` only
        where given (`DecodeState.candidates`: [rows, m] ids among which each row's `deciding_logits` largest lie)."""
        vocab = logits.shape[-1]
        k = self._k(vocab)
        width = min(width, k)
        if k < vocab and not self._nucleus:
            top, indices = self._top(logits, min(k + 1, vocab), within)
            log_p = top[..., :k] - torch.logsumexp(top[..., :k], dim=-1, keepdim=True)
            values, tokens, kept = log_p, indices[..., :k], (log_p > float("-inf")).sum(-1)
            if k + 1 <= vocab:
                straddled = (top[..., k] == top[..., k - 1]).nonzero(as_tuple=True)
                if len(straddled[0]):
                    exact = self._children_from_log_probs(logits[straddled], k)
                    values, tokens = values.clone(), tokens.clone()
                    values[straddled], tokens[straddled] = exact[0], exact[1]
            values, tokens = _by_value_then_id(values, tokens)
            return values[..., :width], tokens[..., :width], kept
        return self._children_from_log_probs(logits, width)

    def _children_from_log_probs(self, logits: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`top_children` through the full policy distribution."""
        log_p = self.log_probs(logits)
        tokens = top_k_mask(log_p, width).nonzero(as_tuple=True)[-1].view(*log_p.shape[:-1], width)
        values, tokens = _by_value_then_id(log_p.gather(-1, tokens), tokens)
        return values, tokens, (log_p > float("-inf")).sum(-1)

    def _top(self, logits: torch.Tensor, count: int, within: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The `count` largest scaled logits of each row (descending) and their token ids, looking only at each row's
        ids `within` [rows, m] where given. Where those hold the row's `count` largest logits, the values are the full
        vocabulary's, and so are the ids wherever no two values are equal (every reader orders equal values by id, or
        reads the full distribution where they straddle the k-th place)."""
        if within is None:
            return largest(self._scaled(logits), count)
        top = torch.topk(self._scaled(logits.gather(-1, within)), count, dim=-1)
        return top.values, within.gather(-1, top.indices)

    def score(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log Pr_φ(target) for each row ([..., V], [...] -> [...]): `log_probs` gathered at `targets`."""
        return score_policies([self], logits, targets)[0]

    def sample(
        self, logits: torch.Tensor, generator: torch.Generator | None = None, uniforms: torch.Tensor | None = None,
        within: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Draw one token id per row of `logits` ([..., V] -> [...]) from the policy.

        Inverse-CDF sampling: each row consumes one uniform number, taken from `uniforms` when
        given (so callers can make draws independent of batch composition) or from `generator`. `within`: as in
        `top_children`.
        """
        kept = self._kept_by_id(logits, within)
        if kept is None:
            probabilities, tokens = self.log_probs(logits).exp(), None
        else:
            probabilities, tokens = kept
        cdf = torch.cumsum(probabilities.double(), dim=-1)
        if uniforms is None:
            uniforms = torch.rand(cdf.shape[:-1], generator=generator, dtype=torch.float64, device="cpu")
        points = uniforms.to(cdf.device, torch.float64).unsqueeze(-1) * cdf[..., -1:]
        drawn = torch.searchsorted(cdf, points, right=True).clamp(max=cdf.shape[-1] - 1)
        return drawn.squeeze(-1) if tokens is None else tokens.gather(-1, drawn).squeeze(-1)

    def _kept_by_id(
        self, logits: torch.Tensor, within: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """For a plain top-k policy: the kept tokens' probabilities and ids, in id order, from one top-k pass. The
        inverse CDF over them draws what the full-vocabulary one draws (the tokens left out add exact zeros), at a
        fraction of the memory traffic. None where the full distribution is needed (a nucleus, no top-k, or a tie
        across the k-th place)."""
        vocab = logits.shape[-1]
        k = self._k(vocab)
        if k >= vocab or self._nucleus:
            return None
        top, indices = self._top(logits, k + 1, within)
        if bool((top[..., k] == top[..., k - 1]).any()):
            return None
        values, tokens = top[..., :k], indices[..., :k]
        log_p = values - torch.logsumexp(values, dim=-1, keepdim=True)
        order = torch.sort(tokens, dim=-1).indices
        return log_p.gather(-1, order).exp(), tokens.gather(-1, order)


def _by_value_then_id(values: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reorder (value, token) pairs of each row by value descending, equal values by token id."""
    by_token = torch.sort(tokens, dim=-1, stable=True)
    values, tokens = values.gather(-1, by_token.indices), by_token.values
    order = torch.sort(values, dim=-1, descending=True, stable=True).indices
    return values.gather(-1, order), tokens.gather(-1, order)


def top_k_mask(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of exactly the k largest logits per row; ties at the k-th value go to lower ids."""
    kth_value = torch.topk(logits, k, dim=-1).values[..., -1:]
    above = logits > kth_value
    at = logits == kth_value
    still_needed = k - above.sum(dim=-1, keepdim=True)
    return above | (at & (torch.cumsum(at.int(), dim=-1) <= still_needed))


def score_policies(policies: Sequence[DecodingPolicy], logits: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
    """Target log-probabilities under several policies from one pass over the logits.

    Equal to `policy.log_probs(logits)` gathered at `targets`, without materialising any
    distribution: one top-k of the raw logits serves every policy (dividing by a temperature
    keeps the order), full-vocabulary normalisers are shared per temperature, and a nucleus is
    searched among the largest logits, widening only on rows whose nucleus is not settled.
    A row's score never depends on its batch-mates.
    """
    return rank_and_score(policies, logits, targets, rank=False)[1]


def rank_and_score(
    policies: Sequence[DecodingPolicy], logits: torch.Tensor, targets: torch.Tensor, rank: bool = True
) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    """`tokens_ahead` of each target (with `rank`) and `score_policies`, from the same top-k of each row: a target
    above a row's smallest kept logit has every token ahead of it among the kept ones, so only the other rows are
    counted over the whole vocabulary."""
    vocab = logits.shape[-1]
    raw = at_least_float32(logits).reshape(-1, vocab)
    flat_targets = targets.reshape(-1)
    target_raw = raw.gather(1, flat_targets.unsqueeze(1)).squeeze(1)
    widths = [p._k(vocab) for p in policies if p._k(vocab) < vocab]
    widths += [min(p._k(vocab), NUCLEUS_SEARCH) for p in policies if p._nucleus]
    top, top_ids = torch.topk(raw, max(widths), dim=-1) if widths else (None, None)
    ahead = _ranked(raw, flat_targets, target_raw, top, top_ids).reshape(targets.shape) if rank else None
    full_normalisers: dict[float, torch.Tensor] = {}
    out = []
    for policy in policies:
        beta = 1.0 if policy.is_greedy else policy.temperature
        k = policy._k(vocab)
        target = target_raw / beta
        if k < vocab:
            normaliser = torch.logsumexp(top[:, :k] / beta, dim=-1)
        else:
            if beta not in full_normalisers:
                full_normalisers[beta] = torch.logsumexp(raw if beta == 1.0 else raw / beta, dim=-1)  # x / 1 is x
            normaliser = full_normalisers[beta]
        if policy._nucleus:
            size, boundary, mass = _nucleus_rows(policy.top_p, raw, beta, top, normaliser, k)
            inside = _within(raw, beta, flat_targets, target, boundary, size)
            score = torch.where(inside, target - normaliser - mass, float("-inf"))
        elif k < vocab:
            inside = _within(raw, beta, flat_targets, target, top[:, k - 1] / beta, k)
            score = torch.where(inside, target - normaliser, float("-inf"))
        else:
            score = target - normaliser
        out.append(score.reshape(targets.shape))
    return ahead, out


def _ranked(
    raw: torch.Tensor, targets: torch.Tensor, target: torch.Tensor, top: torch.Tensor | None, top_ids: torch.Tensor | None
) -> torch.Tensor:
    """`tokens_ahead` of each row of `raw` [N, V]: counted among its `top` logits (descending, ids `top_ids`) where its
    target's logit lies above the smallest of them, as every logit at least as large is then among them."""
    if top is None:
        return tokens_ahead(raw, targets)
    known = target > top[:, -1]
    value, token = target.unsqueeze(1), targets.unsqueeze(1)
    ahead = ((top > value) | ((top == value) & (top_ids < token))).sum(-1)
    if not bool(known.all()):
        rows = (~known).nonzero().squeeze(1)
        ahead[rows] = tokens_ahead(raw[rows], targets[rows])
    return ahead


def _nucleus_rows(
    top_p: float, raw: torch.Tensor, beta: float, top: torch.Tensor, normaliser: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: nucleus size, the scaled logit at its boundary, and the log of its mass.

    `top` holds the min(k, NUCLEUS_SEARCH) largest raw logits per row, sorted; rows whose
    nucleus reaches past them are searched again, eight times wider, until it is settled.
    """
    rows = raw.shape[0]
    size = torch.ones(rows, dtype=torch.long, device=raw.device)
    boundary = torch.zeros(rows, device=raw.device)
    mass = torch.zeros(rows, device=raw.device)
    pending = torch.arange(rows, device=raw.device)
    search = min(k, NUCLEUS_SEARCH)
    values = top[:, :search] / beta
    while len(pending):
        log_p = values - normaliser[pending].unsqueeze(1)
        found = nucleus_size(log_p, top_p)
        settled = (found < search) | (search >= k)
        done = pending[settled]
        size[done] = found[settled]
        boundary[done] = values[settled].gather(1, (found[settled] - 1).unsqueeze(1)).squeeze(1)
        inside = torch.arange(search, device=raw.device) < found[settled].unsqueeze(1)
        mass[done] = torch.logsumexp(log_p[settled].masked_fill(~inside, float("-inf")), dim=-1)
        pending = pending[~settled]
        search = min(k, search * 8)
        if len(pending):
            values = torch.topk(raw[pending], search, dim=-1).values / beta
    return size, boundary, mass


def tokens_ahead(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """How many tokens rank before each target: larger logits, or equal logits with lower ids."""
    target = logits.gather(-1, targets.unsqueeze(-1))
    ahead = (logits > target).sum(-1, dtype=torch.int32)
    tied = (logits == target).sum(-1, dtype=torch.int32) > 1
    if bool(tied.any()):
        ids = torch.arange(logits.shape[-1], device=logits.device)
        lower = ((logits == target) & (ids < targets.unsqueeze(-1))).sum(-1, dtype=torch.int32)
        ahead = ahead + torch.where(tied, lower, 0)
    return ahead.long()


def _within(
    raw: torch.Tensor, beta: float, targets: torch.Tensor, target: torch.Tensor, boundary: torch.Tensor,
    count: torch.Tensor | int,
) -> torch.Tensor:
    """Whether each row's target is among its `count` first tokens, given the scaled logit at that boundary.

    raw: [N, V] logits, scaled by 1/`beta`. Only a target tied with the boundary needs the tie
    rule, which counts over its full row.
    """
    inside = target > boundary
    tie = target == boundary
    if bool(tie.any()):
        rows = tie.nonzero(as_tuple=True)[0]
        limit = count[rows] if isinstance(count, torch.Tensor) else count
        inside[rows] = tokens_ahead(raw[rows] / beta, targets[rows]) < limit
    return inside


def nucleus_size(sorted_log_p: torch.Tensor, top_p: float) -> torch.Tensor:
    """Number of leading tokens of a descending log-prob row kept by the nucleus rule (≥ 1)."""
    sorted_p = sorted_log_p.exp()
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    return ((mass_before < top_p) & (sorted_p > 0)).sum(-1).clamp(min=1)


def top_p_mask(log_p: torch.Tensor, top_p: float) -> torch.Tensor:
    """Boolean mask of the nucleus: the smallest probability-sorted prefix with mass >= top_p."""
    sorted_log_p, order = torch.sort(log_p, dim=-1, descending=True, stable=True)
    size = nucleus_size(sorted_log_p, top_p)
    keep_sorted = torch.arange(log_p.shape[-1], device=log_p.device) < size.unsqueeze(-1)
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def default_policy() -> DecodingPolicy:
    """The policy every method uses when none is given: top-k 40 at temperature 1 (CBS paper §4, (n,p) paper §3)."""
    return DecodingPolicy(temperature=defaults.TEMPERATURE, top_k=defaults.TOP_K)
