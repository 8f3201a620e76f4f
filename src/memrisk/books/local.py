"""A chat model run on this machine behind the ChatProvider interface, so that request logs of the
two-phase procedure can be recorded without an API (and replayed later by `replay`).

Greedy at temperature 0 (or unset); otherwise temperature sampling, each candidate drawing from its
own generator seeded by the request itself (seed, conversation, settings, candidate), so an answer
does not depend on the order of requests. Requests in flight together with equal settings (Phase 1's
`concurrency`) are decoded as one batch (the batch's shape can move floating-point results slightly);
a request identical to one already answered gets the same answer. Frequency and
presence penalties are applied as OpenAI defines them: each token's logit is lowered by
frequency × (times generated) + presence × (generated at all).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field

import torch

from memrisk.books.providers import ChatResponse, GenerationSettings, Usage
from memrisk.decoding import DecodingPolicy
from memrisk.models.backend import LanguageModel, load_model


def request_seed(seed: int, messages: list[dict[str, str]], settings: GenerationSettings, candidate: int) -> int:
    """A 63-bit sampling seed that is a pure function of (seed, conversation, settings, candidate)."""
    text = json.dumps([seed, messages, settings.as_dict(), candidate], ensure_ascii=False, sort_keys=True)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") >> 1


def penalized(logits: torch.Tensor, counts: torch.Tensor, settings: GenerationSettings) -> torch.Tensor:
    """Logits lowered by the frequency and presence penalties for the tokens generated so far ([R, V] each)."""
    frequency, presence = settings.frequency_penalty or 0.0, settings.presence_penalty or 0.0
    if not frequency and not presence:
        return logits
    return logits - frequency * counts - presence * (counts > 0).to(logits.dtype)


@dataclass
class _Request:
    """One request waiting for its batch: its rows (one per candidate) and, once decoded, their tokens."""

    key: str
    prompt: list[int]
    settings: GenerationSettings
    seeds: list[int]
    rows: list[list[int]] | None = None
    failure: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class LocalChatProvider:
    """A causal LM with a chat template answering chat requests; concurrent requests are batched."""

    name = "local"

    def __init__(self, model: str | LanguageModel, *, seed: int = 0, device: str | None = None) -> None:
        self.lm = model if isinstance(model, LanguageModel) else load_model(model, device=device)
        self.model = str(model) if isinstance(model, str) else self.lm.name
        self.seed = seed
        self._pending: list[_Request] = []
        self._answered: dict[str, list[list[int]]] = {}
        self._queue_lock = threading.Lock()
        self._decode_lock = threading.Lock()

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        """Up to `settings.max_tokens` new tokens per candidate, stopping at the model's end-of-sequence token."""
        seeds = [request_seed(self.seed, messages, settings, c) for c in range(settings.candidates)]
        request = _Request(str(seeds), self.lm.chat_ids(messages), settings, seeds)
        with self._queue_lock:
            if request.key in self._answered:
                request.rows = self._answered[request.key]
                return self._response(request)
            self._pending.append(request)
        with self._decode_lock:
            if not request.done.is_set():
                with self._queue_lock:
                    batch = [r for r in self._pending if r.settings == settings]
                    self._pending = [r for r in self._pending if r.settings != settings]
                self._decode(batch)
        if request.failure is not None:
            raise request.failure
        return self._response(request)

    def _decode(self, batch: list[_Request]) -> None:
        """Decode each distinct request of the batch once; identical requests share its rows."""
        try:
            distinct = list({r.key: r for r in batch if r.key not in self._answered}.values())
            if distinct:
                rows = self._generate([r.prompt for r in distinct for _ in r.seeds], batch[0].settings, [s for r in distinct for s in r.seeds])
                start = 0
                for request in distinct:
                    self._answered[request.key], start = rows[start : start + len(request.seeds)], start + len(request.seeds)
            for request in batch:
                request.rows = self._answered[request.key]
        except BaseException as exc:
            for request in batch:
                request.failure = exc
            raise
        finally:
            for request in batch:
                request.done.set()

    def _response(self, request: _Request) -> ChatResponse:
        eos = self.lm.eos_token_id
        texts, reasons, produced = [], [], 0
        for row in request.rows or []:
            ended = eos is not None and eos in row
            tokens = row[: row.index(eos)] if ended else row
            produced += len(tokens) + int(ended)
            texts.append(self.lm.decode(tokens))
            reasons.append("stop" if ended else "length")
        usage = Usage(input=len(request.prompt) * len(request.seeds), output=produced)
        return ChatResponse(tuple(texts), tuple(reasons), usage, 200, self.model)

    @torch.inference_mode()
    def _generate(self, prompts: list[list[int]], settings: GenerationSettings, seeds: list[int]) -> list[list[int]]:
        """Tokens decoded after each prompt (rows stop adding once they emit end-of-sequence)."""
        greedy = not settings.temperature
        policy = DecodingPolicy.greedy() if greedy else DecodingPolicy(temperature=float(settings.temperature))
        generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        eos = self.lm.eos_token_id
        state = self.lm.prefill(prompts)
        counts = torch.zeros(len(prompts), state.logits.shape[-1], device=state.logits.device)
        done = torch.zeros(len(prompts), dtype=torch.bool)
        out: list[torch.Tensor] = []
        for t in range(settings.max_tokens):
            logits = penalized(state.logits.float(), counts, settings)
            if greedy:
                token = policy.log_probs(logits).argmax(-1)
            else:
                uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
                token = policy.sample(logits, uniforms=uniforms)
            out.append(token.cpu())
            if eos is not None:
                done |= token.cpu() == eos
            if bool(done.all()) or t + 1 == settings.max_tokens:
                break
            counts[torch.arange(len(prompts)), token] += 1
            state = self.lm.step(state, token)
        return torch.stack(out, dim=1).tolist()
