"""Decoding-constrained beam search (CBS paper §4, App. C.3, D, E).

Certified bounds on the near-verbatim extraction risk p_{z,ε}: the mass, under a decoding
policy, of every T-token continuation within distance ε of the target suffix. The search
keeps a beam of at most B partial continuations whose scores are exact policy
log-probabilities; every returned continuation's mass is a lower bound, and the mass it did
not explore bounds the rest from above.

Many sequences run at once: rows = sequences × beams share one KV cache, and all bookkeeping
(children, distance states, ranking, bank) is done on tensors. Sequences that finish release
their rows and waiting sequences take their place (compaction and refill).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from tqdm.auto import tqdm

from memrisk import defaults
from memrisk.decoding import DecodingPolicy, default_policy
from memrisk.distance import (
    band_final,
    band_init,
    band_lower_bound,
    band_step,
    char_levenshtein,
    hamming,
    levenshtein,
    sentence_bleu,
)
from memrisk.errors import MemriskError
from memrisk.extraction.inputs import as_model, padded, prefix_suffix_pairs
from memrisk.extraction.probabilistic import verbatim_scores
from memrisk.models.backend import DecodeState, LanguageModel
from memrisk.models.shares import dealt, run_shares, share_count
from memrisk.signature import signature

PRUNE_MODES = (None, "hamming", "levenshtein")
DISTANCES = ("hamming", "levenshtein")


@dataclass(frozen=True)
class Candidate:
    """One returned continuation with its policy log-probability and distances to the target."""

    tokens: tuple[int, ...]
    log_p: float
    hamming: int
    levenshtein: int
    closure: bool = False

    def distance(self, name: str) -> int:
        """Distance to the target under `name` ('hamming' or 'levenshtein')."""
        return self.hamming if name == "hamming" else self.levenshtein


@dataclass(frozen=True)
class Stop:
    """How a search ended: 'completed' at step T, or early at `step` for 'no_viable' or 'tau_min'."""

    reason: str
    step: int


@dataclass(frozen=True)
class CBSResult:
    """Candidates and bound bookkeeping of one sequence's search.

    `covered_mass` is the total mass of the candidates; `bank` the mass of ε-viable paths the
    beam prune dropped (plus, at a τ_min stop, the surviving beam); `eos_mass` the mass of
    paths that emitted EOS before step T and were removed. With tail closure, `closure_bank`
    is the part of `bank` whose only viable completion was scored and returned as a candidate.
    """

    candidates: list[Candidate]
    covered_mass: float
    bank: float
    eos_mass: float
    closure_bank: float
    token_evals: int
    closure_token_evals: int
    stop: Stop
    prune: str | None
    epsilon: int
    suffix_length: int
    anchor: bool = False
    signature: str = ""
    """The settings behind these bounds (`cbs_signature`), to print next to any number taken from them."""

    def lower_bound(self, distance: str = "levenshtein", epsilon: int | None = None) -> float:
        """Certified lower bound on p_{z,ε}: the mass of candidates within `epsilon`."""
        epsilon = self._check(distance, epsilon)
        return math.fsum(math.exp(c.log_p) for c in self.candidates if c.distance(distance) <= epsilon)

    def upper_bound(self, distance: str = "levenshtein", epsilon: int | None = None) -> float:
        """Certified upper bound on p_{z,ε}: the lower bound plus all mass the search did not return.

        ε-pruned runs also give LB(all finals) + bank for their own distance (and for Hamming
        after Levenshtein pruning, whose balls are smaller); the smaller of the two is returned.
        """
        epsilon = self._check(distance, epsilon)
        lower = self.lower_bound(distance, epsilon)
        bound = lower + max(0.0, 1.0 - self.covered_mass)
        if self.prune is not None and distance in (self.prune, "hamming"):
            bound = min(bound, self.covered_mass + max(0.0, self.bank - self.closure_bank))
        return min(1.0, max(bound, lower))

    def _check(self, distance: str, epsilon: int | None) -> int:
        """Validate a (distance, ε) query against what this run can certify."""
        if distance not in DISTANCES:
            raise MemriskError(f"distance must be one of {', '.join(DISTANCES)}; got {distance!r}")
        epsilon = self.epsilon if epsilon is None else epsilon
        if epsilon < 0:
            raise MemriskError(f"epsilon must be >= 0, got {epsilon}")
        if self.prune is not None and epsilon > self.epsilon:
            raise MemriskError(f"this search was pruned at epsilon={self.epsilon}; it cannot bound epsilon={epsilon}")
        return epsilon


@dataclass
class _Search:
    """Per-sequence bookkeeping while a sequence is in the pool."""

    index: int
    finals: list[tuple[tuple[int, ...], float]] = field(default_factory=list)
    closable: list[tuple[tuple[int, ...], float]] = field(default_factory=list)
    bank: float = 0.0
    eos_mass: float = 0.0
    token_evals: int = 0
    stop: Stop | None = None


@dataclass
class _Rows:
    """Beam rows of all sequences in the pool, aligned with the decoding batch."""

    search: torch.Tensor
    log_p: torch.Tensor
    tokens: torch.Tensor
    depth: torch.Tensor
    mismatches: torch.Tensor
    band: torch.Tensor | None
    ghost: torch.Tensor
    anchor: torch.Tensor

    def take(self, index: torch.Tensor) -> _Rows:
        """Rows at `index` (repeats allowed)."""
        return _Rows(
            self.search[index], self.log_p[index], self.tokens[index], self.depth[index],
            self.mismatches[index], None if self.band is None else self.band[index], self.ghost[index], self.anchor[index],
        )

    @staticmethod
    def cat(first: _Rows, second: _Rows) -> _Rows:
        """Rows of both, in order."""
        band = None if first.band is None else torch.cat([first.band, second.band])
        return _Rows(
            torch.cat([first.search, second.search]), torch.cat([first.log_p, second.log_p]),
            torch.cat([first.tokens, second.tokens]), torch.cat([first.depth, second.depth]),
            torch.cat([first.mismatches, second.mismatches]), band, torch.cat([first.ghost, second.ghost]),
            torch.cat([first.anchor, second.anchor]),
        )


def tau_beam(tau_min: float, most_finals: int) -> float:
    """The τ_min early-stop threshold (CBS App. D.2, Algorithm 1 line 26): τ_min over the most final
    candidates a search can return, B·k for k-CBS. A beam whose best element is below it can never
    reach τ_min, because its lower bound sums at most that many descendants, each no more likely.
    For a nucleus, k is the most children a beam element gets (min(max_children, V)); with the
    anchor row, B + 1 elements."""
    return tau_min / most_finals


def _validate(beam_width: int, prune: str | None, epsilon: int, tau_min: float | None, max_children: int) -> None:
    """One clear error for each invalid search parameter."""
    if beam_width < 1:
        raise MemriskError(f"beam_width must be >= 1, got {beam_width}")
    if prune not in PRUNE_MODES:
        raise MemriskError(f"prune must be None, 'hamming' or 'levenshtein'; got {prune!r}")
    if epsilon < 0:
        raise MemriskError(f"epsilon must be >= 0, got {epsilon}")
    if tau_min is not None and not 0.0 < tau_min <= 1.0:
        raise MemriskError(f"tau_min must be in (0, 1], got {tau_min}")
    if max_children < 1:
        raise MemriskError(f"max_children must be >= 1, got {max_children}")


class _BeamSearch:
    """The batched search over all sequences; `run` returns one CBSResult per sequence."""

    def __init__(
        self, lm: LanguageModel, prefixes: list[list[int]], suffixes: list[list[int]], policy: DecodingPolicy,
        beam_width: int, prune: str | None, epsilon: int, tau_min: float | None, tighter: bool,
        eos_token_id: int | None, max_children: int, batch_size: int, compaction: bool, anchor: bool,
    ) -> None:
        self.lm, self.prefixes, self.suffixes, self.policy = lm, prefixes, suffixes, policy
        self.beam_width, self.prune, self.epsilon, self.tighter, self.anchor = beam_width, prune, epsilon, tighter, anchor
        self.eos, self.batch_size, self.compaction = eos_token_id, batch_size, compaction
        self.children = min(max_children, policy.top_k or lm.vocab_size, lm.vocab_size)
        self.deciding = policy.deciding_logits(lm.vocab_size)
        capped = self.children < min(policy.top_k or lm.vocab_size, lm.vocab_size)
        most_finals = (beam_width + int(anchor)) * (self.children + int(anchor and capped))
        self.log_tau_beam = math.log(tau_beam(tau_min, most_finals)) if tau_min is not None else None
        device = lm.device
        self.targets = padded(suffixes, max(len(s) for s in suffixes), device)
        self.target_lengths = torch.tensor([len(s) for s in suffixes], device=device)
        self.searches = [_Search(i) for i in range(len(prefixes))]
        self.stopped = torch.zeros(len(prefixes), dtype=torch.bool, device=device)

    def run(self, windows: Sequence[int], advance: Callable[[int], Any], stop: threading.Event) -> list[_Search]:
        """Process the sequences `windows`, refilling the pool as sequences finish; `advance` hears how many finish each
        step. Returns early, unfinished, once `stop` is set (another share failed)."""
        pending = deque(windows)
        state: DecodeState | None = None
        rows: _Rows | None = None
        with torch.inference_mode():
            while (pending or rows is not None) and not stop.is_set():
                room = self._room(rows)
                if room > 0 and pending:
                    if not self.compaction:
                        state, rows = None, None
                    fresh = [pending.popleft() for _ in range(min(room, len(pending)))]
                    state, rows = self._admit(fresh, state, rows)
                state, rows, finished = self._step(state, rows)
                advance(finished)
        return self.searches

    def _room(self, rows: _Rows | None) -> int:
        """How many waiting sequences join the pool now. With compaction the pool holds about `batch_size` × (B + anchor)
        rows: a live sequence counts at its next width (its rows × children, at most B + anchor) and a newcomer at full
        width, so sequences whose beams pruning has narrowed make room for more. Without it, a batch runs to its end."""
        if rows is None:
            return self.batch_size
        if not self.compaction:
            return 0
        width = self.beam_width + int(self.anchor)
        counts = torch.bincount(rows.search[~rows.ghost], minlength=len(self.searches))
        projected = int((counts * self.children).clamp(max=width).sum())
        return max(0, (self.batch_size * width - projected) // width)

    def _admit(self, fresh: list[int], state: DecodeState | None, rows: _Rows | None) -> tuple[DecodeState, _Rows]:
        """Prefill new sequences and add their single root row each to the pool."""
        new_state = self.lm.prefill([self.prefixes[i] for i in fresh], shared=True)
        device = self.lm.device
        for i in fresh:
            bos = 0 if self.lm.bos_token_id is None else 1
            self.searches[i].token_evals = len(self.prefixes[i]) + bos
        n = len(fresh)
        new_rows = _Rows(
            search=torch.tensor(fresh, device=device),
            log_p=torch.zeros(n, dtype=torch.float64, device=device),
            tokens=torch.zeros(n, self.targets.shape[1], dtype=torch.long, device=device),
            depth=torch.zeros(n, dtype=torch.long, device=device),
            mismatches=torch.zeros(n, dtype=torch.long, device=device),
            band=band_init(n, self.epsilon, device) if self.prune == "levenshtein" else None,
            ghost=torch.zeros(n, dtype=torch.bool, device=device),
            anchor=torch.full((n,), self.anchor, dtype=torch.bool, device=device),
        )
        if state is None or rows is None:
            return new_state, new_rows
        return self.lm.merge(state, new_state), _Rows.cat(rows, new_rows)

    def _expand(self, logits: torch.Tensor, rows: _Rows, within: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Children of every row (the policy looking `within` those token ids where given): tokens, scores, distance
        states, and masks of what survives."""
        values, tokens, kept_size = self.policy.top_children(logits, self.children, within)
        depth = rows.depth + 1
        search = rows.search.clamp(min=0)
        targets, lengths = self.targets[search], self.target_lengths[search]
        target_now = targets.gather(1, (depth - 1).clamp(max=targets.shape[1] - 1).unsqueeze(1))
        if self.anchor:
            values, tokens = self._with_target_child(logits, rows, values, tokens, target_now)
        valid = values > float("-inf")
        n_rows, width = tokens.shape
        tail = torch.where(
            kept_size > valid.sum(-1),
            rows.log_p + torch.log1p(-torch.exp(torch.logsumexp(values.double(), dim=-1)).clamp(max=1.0)),
            float("-inf"),
        )
        mismatches = rows.mismatches.unsqueeze(1) + (tokens != target_now).long()
        final = (depth == lengths).unsqueeze(1).expand(-1, width)
        viable = valid.clone()
        accepted = torch.ones_like(valid)
        band = None
        if self.prune == "hamming":
            viable &= mismatches <= self.epsilon
        elif self.prune == "levenshtein":
            flat = band_step(
                rows.band.repeat_interleave(width, dim=0), depth.repeat_interleave(width),
                tokens.reshape(-1), targets.repeat_interleave(width, dim=0), lengths.repeat_interleave(width),
            )
            band = flat.view(n_rows, width, -1)
            viable &= band_lower_bound(flat, self.tighter).view(n_rows, width) <= self.epsilon
            accepted = band_final(flat).view(n_rows, width) <= self.epsilon
        eos = torch.zeros_like(valid) if self.eos is None else (tokens == self.eos) & ~final
        return {
            "tokens": tokens, "score": rows.log_p.unsqueeze(1) + values.double(), "viable": viable & ~rows.ghost.unsqueeze(1),
            "eos": eos, "final": final, "accepted": accepted, "mismatches": mismatches, "band": band, "tail": tail,
            "on_target": rows.anchor.unsqueeze(1) & (tokens == target_now),
        }

    def _with_target_child(
        self, logits: torch.Tensor, rows: _Rows, values: torch.Tensor, tokens: torch.Tensor, target_now: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Children plus one column holding the target's next token for anchor rows whose capped
        children leave it out (−inf elsewhere), so the target path is always expanded."""
        target = target_now.squeeze(1)
        missing = rows.anchor & ~(tokens == target_now).any(-1)
        extra = values.new_full((len(target),), float("-inf"))
        if bool(missing.any()):  # those rows only: a second top-k over every row's vocabulary costs 1-2% of a step
            extra[missing] = self.policy.score(logits[missing], target[missing]).to(values.dtype)
        return torch.cat([values, extra.unsqueeze(1)], dim=1), torch.cat([tokens, target.unsqueeze(1)], dim=1)

    def _step(self, state: DecodeState, rows: _Rows) -> tuple[DecodeState | None, _Rows | None, int]:
        """One expansion of every row: record finals, prune to B per sequence, advance the cache."""
        c = self._expand(state.logits, rows, state.candidates)
        n_rows, width = c["tokens"].shape
        search = rows.search.unsqueeze(1).expand(-1, width)
        mass = c["score"].exp()
        self._add_per_search(search, mass, c["viable"] & c["eos"], "eos_mass")
        if self.prune is not None:
            tail_rows = torch.isfinite(c["tail"]) & ~rows.ghost
            self._add_per_search(rows.search, c["tail"].exp(), tail_rows, "bank")
        alive = c["viable"] & ~c["eos"]
        is_final = alive & c["final"]
        self._record_finals(rows, c, is_final & c["accepted"])
        ranked = alive & ~c["final"]
        flat_rank = self._rank_within_search(search.reshape(-1), c["score"].reshape(-1), ranked.reshape(-1))
        rank = flat_rank.view(n_rows, width)
        selected = ranked & (rank < self.beam_width)
        if self.anchor:
            selected |= ranked & c["on_target"]  # the target path, kept as one extra row when the B best leave it out
        pruned = ranked & ~selected
        self._add_per_search(search, mass, pruned, "bank")
        if self.prune == "hamming":
            self._record_closable(rows, c, pruned & (c["mismatches"] == self.epsilon))
        finished = self._close_searches(rows, c, is_final, ranked, selected, mass)
        parents, slots = selected.nonzero(as_tuple=True)
        stopped = self.stopped
        keep = ~stopped[rows.search[parents]]
        parents, slots = parents[keep], slots[keep]
        new_rows = self._children_rows(rows, c, parents, slots)
        searches, counts = torch.unique(new_rows.search, return_counts=True)
        for s, count in zip(searches.tolist(), counts.tolist()):
            self.searches[s].token_evals += count
        tokens = c["tokens"][parents, slots]
        if not self.compaction:
            parents, new_rows, tokens = self._pad_beams(rows, parents, new_rows, tokens)
        if len(parents) == 0 or not bool((~new_rows.ghost).any()):
            return None, None, finished
        state = self.lm.step(self.lm.select_rows(state, parents), tokens, self.deciding)
        return state, new_rows, finished

    def _pad_beams(
        self, rows: _Rows, parents: torch.Tensor, new_rows: _Rows, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, _Rows, torch.Tensor]:
        """Padded batches, the paper's fixed shape: every sequence of the batch keeps B rows each
        step (ghost rows where it has fewer paths, or has stopped) until its suffix length."""
        searches, inverse = torch.unique(rows.search, return_inverse=True)
        position = torch.arange(len(rows.search), device=parents.device)
        first = torch.full((len(searches),), len(position), device=parents.device).scatter_reduce(
            0, inverse, position, reduce="amin"
        )
        real = torch.zeros(len(searches), dtype=torch.long, device=parents.device)
        if len(new_rows.search):
            real.index_add_(0, torch.searchsorted(searches, new_rows.search), torch.ones_like(new_rows.search))
        continuing = rows.depth[first] + 1 < self.target_lengths[searches]
        missing = torch.where(continuing, (self.beam_width - real).clamp(min=0), 0)
        source = first.repeat_interleave(missing)
        ghosts = rows.take(source)
        ghosts.ghost = torch.ones_like(ghosts.ghost)
        ghosts.anchor = torch.zeros_like(ghosts.anchor)
        ghosts.depth = ghosts.depth + 1
        return torch.cat([parents, source]), _Rows.cat(new_rows, ghosts), torch.cat([tokens, torch.zeros_like(source)])

    def _children_rows(self, rows: _Rows, c: dict[str, torch.Tensor], parents: torch.Tensor, slots: torch.Tensor) -> _Rows:
        """Beam rows for the selected children."""
        new = rows.take(parents)
        new.log_p = c["score"][parents, slots]
        new.tokens = new.tokens.clone()
        new.tokens[torch.arange(len(parents), device=parents.device), new.depth] = c["tokens"][parents, slots]
        new.depth = new.depth + 1
        new.mismatches = c["mismatches"][parents, slots]
        new.anchor = c["on_target"][parents, slots]
        if c["band"] is not None:
            new.band = c["band"][parents, slots]
        return new

    @staticmethod
    def _rank_within_search(search: torch.Tensor, score: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """0-based rank of each entry among its search's masked entries by descending score.

        Ties keep the flat order (parent rank, then child rank): deterministic.
        """
        order = torch.sort(torch.where(mask, score, float("-inf")), descending=True, stable=True).indices
        order = order[torch.sort(search[order], stable=True).indices]
        sorted_search = search[order]
        position = torch.arange(len(order), device=search.device)
        first = torch.searchsorted(sorted_search, sorted_search, right=False)
        rank = torch.empty_like(position)
        rank[order] = position - first
        return torch.where(mask, rank, torch.iinfo(torch.long).max)

    def _add_per_search(self, search: torch.Tensor, mass: torch.Tensor, mask: torch.Tensor, attribute: str) -> None:
        """Add masked masses into each search's accumulator (one copy to the host for all searches)."""
        totals = torch.zeros(len(self.searches), dtype=torch.float64, device=mass.device)
        totals.index_add_(0, search[mask], mass[mask].double())
        touched = totals.nonzero(as_tuple=True)[0]
        for s, total in zip(touched.tolist(), totals[touched].tolist()):
            setattr(self.searches[s], attribute, getattr(self.searches[s], attribute) + total)

    @staticmethod
    def _paths(rows: _Rows, c: dict[str, torch.Tensor], mask: torch.Tensor) -> list[tuple[int, tuple[int, ...], float]]:
        """(search, full token path, log-probability) of every masked child."""
        parents, slots = mask.nonzero(as_tuple=True)
        if len(parents) == 0:
            return []
        return [
            (search, tuple(history[:depth] + [token]), score)
            for history, token, score, search, depth in zip(
                rows.tokens[parents].tolist(), c["tokens"][parents, slots].tolist(),
                c["score"][parents, slots].tolist(), rows.search[parents].tolist(), rows.depth[parents].tolist(),
            )
        ]

    def _record_finals(self, rows: _Rows, c: dict[str, torch.Tensor], mask: torch.Tensor) -> None:
        """Store completed, accepted continuations with their log-probabilities."""
        for search, path, score in self._paths(rows, c, mask):
            self.searches[search].finals.append((path, score))

    def _record_closable(self, rows: _Rows, c: dict[str, torch.Tensor], mask: torch.Tensor) -> None:
        """Remember pruned Hamming paths at distance exactly ε: one viable completion each."""
        for search, path, score in self._paths(rows, c, mask):
            self.searches[search].closable.append((path, score))

    def _close_searches(
        self, rows: _Rows, c: dict[str, torch.Tensor], is_final: torch.Tensor, ranked: torch.Tensor,
        selected: torch.Tensor, mass: torch.Tensor,
    ) -> int:
        """Mark searches that completed or stop early (no viable child, τ_min); return how many ended. Each live
        search's flags are reduced on the device and copied to the host at once, not read search by search."""
        live = (~rows.ghost).nonzero(as_tuple=True)[0]
        searches, inverse = torch.unique(rows.search[live], return_inverse=True)
        per_search = torch.zeros(len(searches), dtype=torch.long, device=live.device)
        first = torch.full_like(per_search, len(rows.search)).scatter_reduce(0, inverse, live, reduce="amin")
        completed = per_search.index_add(0, inverse, c["final"][live].any(1).long()) > 0
        viable = per_search.index_add(0, inverse, ranked[live].any(1).long()) > 0
        best = [float("inf")] * len(searches)
        if self.log_tau_beam is not None:
            chosen = selected[live]
            best = c["score"].new_full((len(searches),), float("-inf")).scatter_reduce(
                0, inverse.unsqueeze(1).expand_as(chosen)[chosen], c["score"][live][chosen], reduce="amax").tolist()
        ended = []
        for s, complete, has_viable, depth, top in zip(searches.tolist(), completed.tolist(), viable.tolist(),
                                                       (rows.depth[first] + 1).tolist(), best):
            search = self.searches[s]
            if complete:
                search.stop = Stop("completed", depth)
            elif not has_viable:
                search.stop = Stop("no_viable", depth)
            elif self.log_tau_beam is not None and top < self.log_tau_beam:
                own = (rows.search == s) & ~rows.ghost
                search.stop = Stop("tau_min", depth)
                search.bank += float(mass[own][selected[own]].sum())
            if search.stop is not None:
                ended.append(s)
        if ended:
            self.stopped[torch.tensor(ended, device=self.stopped.device)] = True
        return len(ended)


def _locked(update: Callable[[int], Any]) -> Callable[[int], None]:
    """`update` called under a lock, for a progress bar that several shares advance."""
    lock = threading.Lock()

    def locked(n: int) -> None:
        with lock:
            update(n)
    return locked


def _closures(lm: LanguageModel, searches: list[_Search], prefixes: list[list[int]], suffixes: list[list[int]],
              policy: DecodingPolicy, limit: int) -> tuple[dict[int, list[tuple[tuple[int, ...], float, float]]], dict[int, int]]:
    """Teacher-force the single viable completion of each closable path (best `limit` per sequence).

    Returns per sequence the closed candidates (full continuation, its log-probability, the
    banked path log-probability) and the token evaluations spent on them.
    """
    jobs = []
    for s in searches:
        for path, path_log_p in sorted(s.closable, key=lambda item: -item[1])[:limit]:
            jobs.append((s.index, path, path_log_p))
    out: dict[int, list[tuple[tuple[int, ...], float, float]]] = {}
    jobs = [j for j in jobs if len(j[1]) < len(suffixes[j[0]])]
    evals: dict[int, int] = {}
    bos = 0 if lm.bos_token_id is None else 1
    for i, _, _ in jobs:
        evals[i] = evals.get(i, 0) + len(prefixes[i]) + bos + len(suffixes[i])
    if not jobs:
        return out, evals
    scores = verbatim_scores(
        lm, [prefixes[i] + list(path) for i, path, _ in jobs], [suffixes[i][len(path):] for i, path, _ in jobs], policy
    )
    for (i, path, path_log_p), rest in zip(jobs, scores.log_p[:, 0].tolist()):
        if rest > float("-inf"):
            out.setdefault(i, []).append((tuple(path) + tuple(suffixes[i][len(path):]), path_log_p + rest, path_log_p))
    return out, evals


def cbs(
    model: Any,
    prefixes: Any,
    suffixes: Any,
    policy: DecodingPolicy | None = None,
    *,
    beam_width: int = defaults.BEAM_WIDTH,
    prune: str | None = defaults.PRUNE,
    epsilon: int = defaults.EPSILON,
    tau_min: float | None = None,
    tighter_levenshtein: bool = False,
    tail_closure: bool = False,
    closure_limit: int | None = None,
    eos_token_id: int | None | str = "auto",
    max_children: int = defaults.MAX_CHILDREN,
    batch_size: int | None = None,
    compaction: bool = True,
    anchor: bool = True,
    shares: int | Literal["auto"] = defaults.SHARES,
    progress: bool = False,
) -> list[CBSResult]:
    """Decoding-constrained beam search for every (prefix, suffix): certified bounds on p_{z,ε}.

    `policy` defaults to top-k 40. `prune` selects Algorithm 1 (None), 2 ('hamming') or
    3 ('levenshtein', the default, as in `memrisk run`) with budget `epsilon`; `tau_min` enables the τ_min/(B·k) early stop.
    `tighter_levenshtein` uses the keep rule min_j D[t,j] + |t−j| ≤ ε; `tail_closure` scores the
    one viable completion of pruned Hamming paths at distance ε (best `closure_limit` per
    sequence, default B) and adds it to the lower bound. Children per beam element are the
    policy's kept set, capped at the `max_children` most likely tokens; mass beyond the cap is
    banked. `eos_token_id` ('auto': the model's) ends paths that emit it before step T.
    About `batch_size` × B rows (default batch size: the model's) run at once; with `compaction`
    finished sequences and beams narrowed by pruning free rows for waiting sequences, without it
    a batch of `batch_size` sequences runs padded until all of them finish (the paper's
    behaviour, for comparison). `anchor` keeps the
    target's own path in the beam (one extra row when the B best leave it out), so the lower
    bound at ε = 0 is p_z whenever the search is not stopped by τ_min; `anchor=False` is the
    paper's Algorithms 1–3 exactly (docs/cbs.md). On CPU the sequences can be dealt into `shares` pools run side by
    side, one thread each ('auto': one per thread while each pool keeps enough rows): at times faster on a few cores,
    with the same results, floats aside where a forward holds few rows (`models.shares`, docs/performance.md).
    """
    lm = as_model(model)
    prefix_ids, suffix_ids = prefix_suffix_pairs(lm, prefixes, suffixes)
    policy = default_policy() if policy is None else policy
    _validate(beam_width, prune, epsilon, tau_min, max_children)
    if tail_closure and prune != "hamming":
        raise MemriskError("tail_closure applies to Hamming-pruned search only (prune='hamming')")
    eos = lm.eos_token_id if eos_token_id == "auto" else eos_token_id
    batch = batch_size or lm.batch_size
    if shares != "auto" and (type(shares) is not int or shares < 1):
        raise MemriskError(f"shares must be a positive integer or 'auto', got {shares!r}")
    count = share_count(lm, len(prefix_ids), beam_width + int(anchor), batch) if shares == "auto" else shares
    bar = tqdm(total=len(prefix_ids), desc="CBS", unit="seq", disable=not progress)
    advance = _locked(bar.update)

    def share(windows: list[int]) -> Callable[[LanguageModel, threading.Event], list[_Search]]:
        def job(worker: LanguageModel, stop: threading.Event) -> list[_Search]:
            search = _BeamSearch(
                worker, prefix_ids, suffix_ids, policy, beam_width, prune, epsilon, tau_min, tighter_levenshtein,
                eos, max_children, max(1, batch // count), compaction, anchor,
            )
            return search.run(windows, advance, stop)
        return job

    parts = dealt(len(prefix_ids), count)
    try:
        ran = run_shares(lm, [share(windows) for windows in parts])
    finally:
        bar.close()
    found = {i: share_searches[i] for windows, share_searches in zip(parts, ran) for i in windows}
    searches = [found[i] for i in range(len(prefix_ids))]
    with torch.inference_mode():
        closures, closure_evals = (
            _closures(lm, searches, prefix_ids, suffix_ids, policy, closure_limit or beam_width) if tail_closure else ({}, {})
        )
    signed = cbs_signature(policy, beam_width, prune, epsilon, anchor, tau_min, max_children, tighter_levenshtein, tail_closure)
    results = []
    for s, suffix in zip(searches, suffix_ids):
        candidates = [Candidate(tokens, lp, hamming(tokens, suffix), levenshtein(tokens, suffix)) for tokens, lp in s.finals]
        closed = closures.get(s.index, [])
        candidates += [Candidate(tokens, lp, hamming(tokens, suffix), levenshtein(tokens, suffix), True) for tokens, lp, _ in closed]
        candidates.sort(key=lambda c: -c.log_p)
        results.append(CBSResult(
            candidates=candidates,
            covered_mass=math.fsum(math.exp(c.log_p) for c in candidates),
            bank=s.bank,
            eos_mass=s.eos_mass,
            closure_bank=math.fsum(math.exp(banked) for _, _, banked in closed),
            token_evals=s.token_evals,
            closure_token_evals=closure_evals.get(s.index, 0),
            stop=s.stop or Stop("completed", len(suffix)),
            prune=prune,
            epsilon=epsilon,
            suffix_length=len(suffix),
            anchor=anchor,
            signature=signed,
        ))
    return results


@dataclass(frozen=True)
class TextMasses:
    """Candidate mass judged on decoded text: BLEU ≥ threshold, and character edit distance ≤ c."""

    bleu: float
    char_levenshtein: dict[int, float]


def text_masses(
    result: CBSResult,
    decode: Any,
    reference: str,
    *,
    bleu_threshold: float = 0.75,
    char_epsilons: Sequence[int] = (0, 5, 10, 25),
    negligible: float = 0.0,
) -> TextMasses:
    """Post-process candidates on decoded text (CBS §F.9): lower bounds on BLEU and character balls.

    Candidates are visited from the most likely; once the mass left is below `negligible` the
    rest are skipped, so both masses stay lower bounds.
    """
    bleu, chars = [], {c: [] for c in char_epsilons}
    remaining = result.covered_mass
    for candidate in result.candidates:
        if remaining < negligible:
            break
        p = math.exp(candidate.log_p)
        remaining -= p
        text = decode(candidate.tokens)
        if sentence_bleu(text, reference) >= bleu_threshold:
            bleu.append(p)
        distance = char_levenshtein(text, reference)
        for c in char_epsilons:
            if distance <= c:
                chars[c].append(p)
    return TextMasses(math.fsum(bleu), {c: math.fsum(v) for c, v in chars.items()})


def cbs_signature(policy: DecodingPolicy, beam_width: int, prune: str | None, epsilon: int, anchor: bool, tau_min: float | None,
                  max_children: int, tighter_levenshtein: bool, tail_closure: bool) -> str:
    """The signature of a CBS search: every setting that changes its bounds."""
    return signature("cbs", policy=policy.name, B=beam_width, prune=prune, eps=epsilon, anchor=anchor, tau=tau_min,
                     children=max_children, tighter=tighter_levenshtein, closure=tail_closure)


def token_evaluation_limit(prefix_length: int, suffix_length: int, beam_width: int) -> int:
    """The cost ceiling a + (T − 1)·B token evaluations of one sequence's search (CBS paper App. C.3)."""
    return prefix_length + (suffix_length - 1) * beam_width

