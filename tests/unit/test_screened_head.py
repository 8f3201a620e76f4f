"""The screened output head (models/linears.py): for a reader of each row's top logits only, BLAS's own logits there.

Equalities here are exact: the screened head's top logits come from BLAS products of the sliced head's shapes, on the
same rows and threads, and a search that reads only those makes the same records bit for bit. `HeadScreen.pays`
checks that once per process and screens only where oneDNN is the faster; the tests force the screen on, whatever
this machine's speeds."""

from __future__ import annotations

import numpy
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import memrisk
from memrisk import DecodingPolicy
from memrisk.models import linears

TOP = 41  # top-k 40 reads 41 logits
ROWS = 64  # ≥ SCREEN_MIN_ROWS
VOCAB = linears.SCREEN_MIN_SLICES * linears.VOCABULARY_SLICE + 300  # full slices and a partial one


@pytest.fixture
def screened(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Screening forced on whatever this machine's speeds; returns a list that grows by one per exact column product."""
    calls: list[int] = []
    product = linears.column_logits
    monkeypatch.setattr(linears.HeadScreen, "pays", lambda self, sliced: True)
    monkeypatch.setattr(linears, "column_logits", lambda *args: calls.append(1) or product(*args))
    return calls


def heads(hidden_size: int = 256, vocab: int = VOCAB) -> tuple[torch.nn.Linear, linears.SlicedHead, linears.ScreenedHead]:
    """A random bias-free head, its sliced and its screened forms."""
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden_size, vocab, bias=False)
    return head, linears.SlicedHead(head), linears.ScreenedHead(head, linears.HeadScreen(), TOP)


def test_a_screened_head_gives_blas_bits_at_each_rows_top_and_smaller_values_below(screened: list[int]) -> None:
    head, sliced, screen = heads()
    hidden = torch.randn(ROWS, 256, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        full, fast, approximate = sliced(hidden), screen(hidden), linears.onednn_product(hidden, head.weight)
    assert screened == [1]  # the screen ran, with one exact product
    top = torch.topk(full, TOP, dim=-1)
    fast_top = torch.topk(fast, TOP, dim=-1)
    assert torch.equal(fast_top.values, top.values) and torch.equal(fast_top.indices, top.indices)
    threshold = top.values[:, -1:]
    at_top = full >= threshold
    assert torch.equal(fast[at_top], full[at_top])
    assert bool((fast[~at_top] < threshold.expand_as(full)[~at_top]).all())
    exact = torch.zeros(VOCAB, dtype=torch.bool)
    exact[screen.candidates.flatten()] = True  # the union of the rows' candidates: columns BLAS computed for every row
    assert torch.equal(fast[:, exact], full[:, exact])
    assert torch.equal(fast[:, ~exact], approximate[:, ~exact])  # elsewhere oneDNN's values stayed (on some CPUs BLAS's bits)
    candidates = screen.candidates  # each row's top + SCREEN_SPARE largest approximate logits: its top among them
    assert candidates.shape == (ROWS, TOP + linears.SCREEN_SPARE)
    assert bool(torch.isin(top.indices, candidates).view(ROWS, -1).all()) and torch.equal(fast.gather(1, candidates), full.gather(1, candidates))
    policy = DecodingPolicy(top_k=TOP - 1)
    for got, want in zip(policy.top_children(fast, 20, candidates), policy.top_children(full, 20)):
        assert torch.equal(got, want)


def test_a_tie_across_the_margin_widens_the_rows_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    """60 equal weight rows make 60 logits tie at each row's top, past `top` + `SCREEN_SPARE`: no row is certified
    until it takes `SCREEN_WIDER` times as many tokens; then the tied logits are BLAS's, every one."""
    head, sliced, screen = heads()
    generator = torch.Generator().manual_seed(6)
    direction = torch.randn(256, generator=generator)
    with torch.no_grad():
        head.weight[:60] = direction / direction.norm()
    hidden = (torch.randn(256, generator=generator) + 30 * direction / direction.norm()).expand(ROWS, 256).contiguous()
    widths: list[int] = []
    product = linears.column_logits
    monkeypatch.setattr(linears.HeadScreen, "pays", lambda self, sliced: True)
    monkeypatch.setattr(linears, "column_logits", lambda rows, weight, columns: widths.append(len(columns)) or product(rows, weight, columns))
    with torch.inference_mode():
        full, fast = sliced(hidden), screen(hidden)
    assert len(widths) == 1 and widths[0] >= linears.SCREEN_WIDER * (TOP + linears.SCREEN_SPARE)
    assert torch.equal(fast[:, :60], full[:, :60]) and bool((full[:, :60] == full[:, :1]).all())
    top = torch.topk(full, TOP, dim=-1).values[:, -1:]
    assert torch.equal(fast[full >= top], full[full >= top]) and bool((fast[full < top] < top.expand_as(full)[full < top]).all())
    assert screen.candidates.shape == (ROWS, widths[0])  # a widened row: every row looks among all exact columns
    assert torch.equal(fast.gather(1, screen.candidates), full.gather(1, screen.candidates))
    policy = DecodingPolicy(top_k=TOP - 1)
    for got, want in zip(policy.top_children(fast, 20, screen.candidates), policy.top_children(full, 20)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_column_logits_are_the_sliced_heads_bits_at_any_width_and_thread_count(threads: int) -> None:
    """Widths where a plain product of gathered columns sums in MKL's other order at 4 threads (17, 100 of K = 576),
    groups past one slice, and columns in the partial last slice; the products go into a scratch kept from a call with
    more rows (its first 40 rows)."""
    head, sliced, _ = heads(hidden_size=576)
    generator = torch.Generator().manual_seed(5)
    hidden = torch.randn(40, 576, generator=generator)
    kept = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            full = sliced(hidden)
            wider = torch.randn(64, 576, generator=generator)
            assert torch.equal(linears.column_logits(wider, head.weight, torch.arange(3)), sliced(wider)[:, :3])
            for count in (1, 17, 100, linears.VOCABULARY_SLICE + 1, 3 * linears.VOCABULARY_SLICE):
                columns = torch.randperm(VOCAB, generator=generator)[:count].sort().values
                assert torch.equal(linears.column_logits(hidden, head.weight, columns), full[:, columns])
            tail = torch.arange(VOCAB - 7, VOCAB)
            assert torch.equal(linears.column_logits(hidden, head.weight, tail), full[:, tail])
    finally:
        torch.set_num_threads(kept)


def test_uncertified_rows_and_small_batches_get_the_full_sliced_head(screened: list[int]) -> None:
    _, sliced, screen = heads()
    flat = torch.zeros(ROWS, 256)  # every logit ties: no margin certifies any row's top
    few = torch.randn(4, 256, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        assert torch.equal(screen(flat), sliced(flat)) and screen.candidates is None
        assert torch.equal(screen(few), sliced(few)) and screen.candidates is None
    assert screened == []


def test_below_full_float32_precision_the_head_is_not_screened(screened: list[int]) -> None:
    """At torch's "medium" float32 precision oneDNN may multiply in bfloat16, past the bound the screen relies on."""
    _, sliced, screen = heads()
    hidden = torch.randn(ROWS, 256, generator=torch.Generator().manual_seed(1))
    kept = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        with torch.inference_mode():
            assert torch.equal(screen(hidden), sliced(hidden))
    finally:
        torch.set_float32_matmul_precision(kept)
    assert screened == []
    with torch.inference_mode():
        screen(hidden)
    assert screened == [1]


def test_the_error_bound_covers_blas_against_onednn() -> None:
    """2·γ_K·‖h‖·max‖w‖ against the measured difference, on rows scaled over six orders of magnitude."""
    head, _, _ = heads(hidden_size=576, vocab=4096)
    bound = linears.HeadScreen()
    generator = torch.Generator().manual_seed(3)
    rows = torch.randn(ROWS, 576, generator=generator) * torch.logspace(-3, 3, ROWS).unsqueeze(1)
    with torch.inference_mode():
        difference = (rows @ head.weight.t() - linears.onednn_product(rows, head.weight)).abs().amax(dim=-1)
    error = bound.error(rows, head.weight)
    assert bool((difference <= error).all())
    assert bool((error < 1e-3 * rows.norm(dim=1) * head.weight.norm(dim=1).max()).all())  # and it is tight enough to use
    with torch.no_grad():
        head.weight.mul_(10)  # an in-place change of the weights: the bound follows them
    assert torch.allclose(bound.error(rows, head.weight), 10 * error, rtol=1e-6)


def test_the_largest_row_norm_taken_in_blocks_is_the_whole_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row's norm is summed within the row, so blocks of rows (a partial one last) give the same float64 bits."""
    weight = torch.randn(1000, 576, generator=torch.Generator().manual_seed(5))
    weight[777] *= 3  # the largest row, inside the fourth block
    monkeypatch.setattr(linears, "NORM_BLOCK_ROWS", 256)
    assert linears.largest_row_norm(weight) == float(weight.double().norm(dim=1).max())


def test_the_screen_is_off_where_a_partial_product_would_change_blas_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    _, sliced, _ = heads()
    exact = linears.HeadScreen()
    product = linears.column_logits
    monkeypatch.setattr(linears, "column_logits", lambda *args: product(*args) + 1e-6)
    with torch.inference_mode():
        assert exact.pays(sliced) is False
    monkeypatch.setattr(linears, "column_logits", lambda *args: pytest.fail("measured once per thread count"))
    assert exact.pays(sliced) is False
    monkeypatch.undo()

    def refused(*args: object) -> torch.Tensor:
        raise RuntimeError("oneDNN cannot take this weight")

    monkeypatch.setattr(linears, "onednn_product", refused)
    with torch.inference_mode():
        assert linears.HeadScreen().pays(sliced) is False


def test_the_policy_says_which_logits_decide() -> None:
    assert DecodingPolicy(top_k=40).deciding_logits(100) == 41
    assert DecodingPolicy.greedy().deciding_logits(100) == 2
    assert DecodingPolicy(temperature=0.7, top_k=40).deciding_logits(100) == 41
    assert DecodingPolicy(top_k=40, top_p=0.9).deciding_logits(100) is None
    assert DecodingPolicy().deciding_logits(100) is None
    assert DecodingPolicy(top_k=100).deciding_logits(100) is None


@pytest.mark.parametrize("prune", [None, "levenshtein"])
def test_cbs_and_monte_carlo_records_are_the_same_screened(screened: list[int], monkeypatch: pytest.MonkeyPatch, prune: str | None) -> None:
    """k-CBS and an anchored Levenshtein CBS (4 windows × B = 20 rows a step), and Monte Carlo sampling of 64 rows, on a
    random Llama whose hidden size (256) makes oneDNN's logits differ from BLAS's: every result equal, floats included, and the same tokens drawn, with the screen on and off."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=256, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    lm = memrisk.load_model(LlamaForCausalLM(config).eval())
    generator = torch.Generator().manual_seed(4)
    prefixes = torch.randint(0, linears.VOCABULARY_SLICE, (4, 6), generator=generator).tolist()
    suffixes = torch.randint(0, linears.VOCABULARY_SLICE, (4, 5), generator=generator).tolist()
    policy = DecodingPolicy(top_k=40)

    def records() -> tuple[list[object], list[list[list[int]]]]:
        drawn: list[list[list[int]]] = []
        memrisk.monte_carlo(lm, prefixes[:1], suffixes[:1], policy, samples=64, epsilon=3, max_rows=64,
                            on_samples=lambda example, tokens: drawn.append(numpy.asarray(tokens).tolist()))
        assert sum(len(batch) for batch in drawn) == 64
        return memrisk.cbs(lm, prefixes, suffixes, policy, beam_width=20, prune=prune, epsilon=3, batch_size=4), drawn

    on = records()
    assert screened
    monkeypatch.setattr(linears.HeadScreen, "pays", lambda self, sliced: False)
    assert records() == on
