"""`provider: local` on a tiny random model (no chat template, so the plain layout): greedy is deterministic,
max_tokens and candidates are honoured, sampling is seeded by the request alone (batched or not), identical requests
get identical answers, penalties apply."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from memrisk.books.local import LocalChatProvider, penalized
from memrisk.books.providers import GenerationSettings
from memrisk.models.backend import plain_chat


def conversation(words: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": words}]


def test_greedy_answers_follow_the_plain_layout_and_honour_max_tokens(word_model) -> None:
    provider = LocalChatProvider(word_model)
    settings = GenerationSettings(temperature=0.0, max_tokens=6)
    first = provider.complete(conversation("the quick brown fox"), settings)
    assert first == provider.complete(conversation("the quick brown fox"), settings)
    prompt = word_model.encode(plain_chat(conversation("the quick brown fox")))
    assert first.usage.input == len(prompt)
    assert first.usage.output == 6 and first.finish_reasons == ("length",)
    ids = torch.tensor([prompt])
    expected = word_model.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, pad_token_id=0)[0, len(prompt):]
    assert first.text == word_model.decode(expected.tolist())


def test_sampled_candidates_depend_on_the_request_only_not_on_the_batch(word_model) -> None:
    provider = LocalChatProvider(word_model, seed=3)
    settings = GenerationSettings(temperature=1.0, max_tokens=8, candidates=3)
    prompts = ["the quick brown fox", "a river ran past old mill", "bird sang in tree", "the lazy dog sat"]
    alone = [provider.complete(conversation(p), settings) for p in prompts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda p: provider.complete(conversation(p), settings), prompts))
    assert [r.texts for r in together] == [r.texts for r in alone]
    twice = LocalChatProvider(word_model, seed=3)
    with ThreadPoolExecutor(max_workers=4) as pool:
        same = list(pool.map(lambda p: twice.complete(conversation(p), settings), [prompts[1]] * 4))
    assert all(r == same[0] for r in same) and same[0].texts == alone[1].texts
    assert all(len(r.texts) == 3 and r.usage.output == 24 for r in alone)
    assert len({t for r in alone for t in r.texts}) > 4
    assert LocalChatProvider(word_model, seed=4).complete(conversation(prompts[0]), settings).texts != alone[0].texts


def test_penalties_lower_generated_tokens_as_openai_defines_them() -> None:
    logits = torch.zeros(1, 4)
    counts = torch.tensor([[0.0, 1.0, 3.0, 0.0]])
    lowered = penalized(logits, counts, GenerationSettings(frequency_penalty=0.5, presence_penalty=0.25))
    assert lowered.tolist() == [[0.0, -0.75, -1.75, 0.0]]
    assert penalized(logits, counts, GenerationSettings()) is logits
