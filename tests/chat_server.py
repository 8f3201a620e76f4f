"""A local OpenAI-compatible chat-completions server backed by a real loaded language model.

Test support only (not a test module). `ChatServer` binds 127.0.0.1 on an ephemeral port and
serves, from a daemon thread (stdlib `http.server`, no extra dependencies):

* ``POST /v1/chat/completions`` -- answers from the wrapped `memrisk.LanguageModel` through its
  tokenizer's chat template. Greedy when ``temperature`` is 0 or absent; otherwise sampled with a
  `torch.Generator` seeded from the request's ``seed`` (default 0), so answers are reproducible.
  Honours ``max_completion_tokens`` / ``max_tokens`` (default 16), ``n`` and ``stop``. A
  ``Authorization: Bearer <key>`` header is required (401 otherwise).
* ``GET /v1/models`` -- a minimal model list.

Prompt caching is simulated: ``usage.prompt_tokens_details.cached_tokens`` is the longest common
token prefix between this prompt and the prompt of the previous successfully answered request,
rounded down to a multiple of 16 (0 below 16).

Faults are injected with `ChatServer.inject`; each incoming (authorised, well-formed) request
consumes at most one queued fault, first in first out, and the fault decides the answer:

==========================  ===================================================================
``"refusal"``               200, every choice is `REFUSAL_TEXT`
``"empty"``                 200, every choice is ``""`` (finish_reason "stop", 0 tokens)
``"429"``                   429 rate-limit error JSON with a ``retry-after: 0`` header
``"500"`` / ``"503"``       server error JSON with that status
``"slow"``                  sleeps `ChatServer.slow_seconds`, then answers normally (if the
                            client is still connected)
``{"text": "..."}``         200, that exact content for every choice
``{"choices": [...]}``      200, these exact contents as the choices (their count is ``n``)
==========================  ===================================================================

Example::

    with ChatServer(lm) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        server.inject("429", "refusal")
        ...
"""

from __future__ import annotations

import inspect
import json
import select
import socket
import threading
import time
import traceback
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

REFUSAL_TEXT = "I'm sorry, but I can't continue this text because it is copyrighted."
STATUS_FAULTS = {
    "429": (429, "Rate limit reached for requests (injected fault).", "rate_limit_exceeded"),
    "500": (500, "The server had an error while processing your request (injected fault).", "server_error"),
    "503": (503, "The engine is currently overloaded (injected fault).", "service_unavailable"),
}
NAMED_FAULTS = frozenset({"refusal", "empty", "slow", *STATUS_FAULTS})
DEFAULT_MAX_TOKENS = 16
CACHE_BLOCK = 16

Fault = str | dict[str, Any]


class _HTTPError(Exception):
    """An error answer: HTTP status, OpenAI-style error object and extra headers."""

    def __init__(self, status: int, message: str, kind: str, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        self.headers = headers or {}


class ChatServer:
    """OpenAI-compatible chat-completions server on 127.0.0.1 answering from a loaded model.

    Attributes: `base_url` ("http://127.0.0.1:PORT/v1"), `requests` (every received
    chat-completions body as parsed JSON, in arrival order, faulted and unauthorised ones
    included), `api_keys` (the bearer key of each request, "" when missing, parallel to
    `requests`), `answered` (count of 200 answers with non-empty content), `slow_seconds`
    (delay of the "slow" fault) and `api_key` (if set, the only bearer key accepted).
    """

    def __init__(self, lm: Any, *, slow_seconds: float = 3.0, api_key: str | None = None) -> None:
        self.lm = lm
        self.slow_seconds = slow_seconds
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.api_keys: list[str] = []
        self.answered = 0
        self._faults: deque[Fault] = deque()
        self._last_prompt: list[int] = []
        self._epoch = 0  # bumped by reset(); answers of older requests no longer touch the state
        self._state_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ChatServer:
        """Bind an ephemeral port and serve from a daemon thread."""
        if self._httpd is not None:
            return self
        handler = type("Handler", (_Handler,), {"chat": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="chat-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (in-flight answers are abandoned)."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """Base URL to give the OpenAI client."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- faults ----------------------------------------------------------------------------

    def inject(self, *faults: Fault) -> None:
        """Queue faults (FIFO); each request consumes at most one. Unknown faults raise ValueError."""
        for fault in faults:
            _check_fault(fault)
        with self._state_lock:
            self._faults.extend(faults)

    @property
    def pending_faults(self) -> list[Fault]:
        """Faults not consumed yet, next first."""
        with self._state_lock:
            return list(self._faults)

    def reset(self) -> None:
        """Forget recorded requests, keys, the answered count, queued faults and the cache."""
        with self._state_lock:
            self.requests.clear()
            self.api_keys.clear()
            self._faults.clear()
            self._last_prompt = []
            self.answered = 0
            self._epoch += 1

    # -- answering -------------------------------------------------------------------------

    def _receive(self, body: dict[str, Any], key: str) -> tuple[Fault | None, int]:
        """Record a request; if authorised, pop its fault. Returns (fault, epoch)."""
        with self._state_lock:
            self.requests.append(body)
            self.api_keys.append(key)
            authorised = bool(key) and (self.api_key is None or key == self.api_key)
            fault = self._faults.popleft() if authorised and self._faults else None
            return fault, self._epoch

    def _complete(self, body: dict[str, Any], fault: Fault | None, epoch: int,
                  client_gone: Any) -> dict[str, Any] | None:
        """The chat.completion object for a request (None if the client left during "slow")."""
        if isinstance(fault, str) and fault in STATUS_FAULTS:
            status, message, kind = STATUS_FAULTS[fault]
            headers = {"retry-after": "0"} if status == 429 else {}
            raise _HTTPError(status, message, kind, kind, headers)
        params = _parse_params(body)
        if fault == "slow":
            deadline = time.monotonic() + self.slow_seconds
            while time.monotonic() < deadline:
                if client_gone():
                    return None
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            fault = None
        tokenizer = self.lm.tokenizer
        with self._model_lock:
            prompt = prompt_ids(tokenizer, params["messages"])
            if fault is None:
                choices = self._generate(prompt, params)
            else:
                choices = [(text, "stop", len(_encode(tokenizer, text))) for text in _fault_texts(fault, params["n"])]
            with self._state_lock:
                current = epoch == self._epoch
                cached = _cached_tokens(self._last_prompt, prompt) if current else 0
                if current:
                    self._last_prompt = prompt
                    if any(text for text, _, _ in choices):
                        self.answered += 1
        completion_tokens = sum(count for _, _, count in choices)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or getattr(self.lm, "name", "local"),
            "system_fingerprint": "fp_memrisk_test",
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish,
                }
                for i, (text, finish, _) in enumerate(choices)
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt) + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }

    def _generate(self, prompt: list[int], params: dict[str, Any]) -> list[tuple[str, str, int]]:
        """n (content, finish_reason, completion_tokens) triples from the model."""
        temperature = params["temperature"]
        if temperature <= 0:
            one = generate(self.lm, prompt, params["max_tokens"], params["stop"])
            return [one] * params["n"]
        generator = torch.Generator(device="cpu").manual_seed(params["seed"])
        return [
            generate(self.lm, prompt, params["max_tokens"], params["stop"], temperature, generator)
            for _ in range(params["n"])
        ]


# -- model helpers ----------------------------------------------------------------------------


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of `messages` through the chat template, with the assistant generation prompt."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return _encode(tokenizer, text)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def generate(lm: Any, prompt: list[int], max_tokens: int, stop: list[str], temperature: float = 0.0,
             generator: torch.Generator | None = None) -> tuple[str, str, int]:
    """Decode one continuation with a KV cache: (content, finish_reason, completion_tokens).

    Greedy when `temperature` <= 0, else sampled from softmax(logits / temperature) with
    `generator`. Stops at EOS, at `max_tokens` ("length"), or when the text contains a stop
    string (the content is cut before it; the tokens generated so far are counted).
    """
    model, tokenizer = lm.model, lm.tokenizer
    eos = lm.eos_token_id
    device = lm.device
    tokens: list[int] = []
    text = ""
    cache = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"  # as the backend names it
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
        for _ in range(max_tokens):
            logits = out.logits[0, -1].float()
            if temperature > 0:
                probs = torch.softmax(logits / temperature, dim=-1).cpu()
                token = int(torch.multinomial(probs, 1, generator=generator))
            else:
                token = int(torch.argmax(logits))
            if token == eos:
                return text, "stop", len(tokens)
            tokens.append(token)
            text = tokenizer.decode(tokens, skip_special_tokens=True)
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                return text[:cut], "stop", len(tokens)
            out = model(input_ids=torch.tensor([[token]], device=device), use_cache=True, **{cache: out[cache]})
    return text, "length", len(tokens)


def _cached_tokens(previous: list[int], prompt: list[int]) -> int:
    common = 0
    for a, b in zip(previous, prompt):
        if a != b:
            break
        common += 1
    return common // CACHE_BLOCK * CACHE_BLOCK


def _fault_texts(fault: Fault, n: int) -> list[str]:
    if fault == "refusal":
        return [REFUSAL_TEXT] * n
    if fault == "empty":
        return [""] * n
    if isinstance(fault, dict) and "choices" in fault:
        return [str(text) for text in fault["choices"]]
    return [str(fault["text"])] * n  # type: ignore[index]


def _check_fault(fault: Fault) -> None:
    if isinstance(fault, str):
        if fault not in NAMED_FAULTS:
            raise ValueError(f"unknown fault {fault!r}; expected one of {sorted(NAMED_FAULTS)} or a dict")
        return
    if isinstance(fault, dict):
        if set(fault) == {"text"} and isinstance(fault["text"], str):
            return
        if (set(fault) == {"choices"} and isinstance(fault["choices"], (list, tuple)) and fault["choices"]
                and all(isinstance(c, str) for c in fault["choices"])):
            return
    raise ValueError(f"unknown fault {fault!r}; expected a name, {{'text': str}} or {{'choices': [str, ...]}}")


def _parse_params(body: dict[str, Any]) -> dict[str, Any]:
    """Validated generation parameters of a request (400 on bad input)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _HTTPError(400, "'messages' must be a non-empty list", "invalid_request_error", "invalid_value")
    if body.get("stream"):
        raise _HTTPError(400, "streaming is not supported by this test server", "invalid_request_error")
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    stop = body.get("stop") or []
    params = {
        "messages": [_message(m) for m in messages],
        "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        "n": body.get("n") or 1,
        "temperature": body.get("temperature") or 0.0,
        "seed": body.get("seed") or 0,
        "stop": [stop] if isinstance(stop, str) else list(stop),
    }
    if not isinstance(params["max_tokens"], int) or params["max_tokens"] < 1:
        raise _HTTPError(400, "max_tokens must be a positive integer", "invalid_request_error", "invalid_value")
    if not isinstance(params["n"], int) or params["n"] < 1:
        raise _HTTPError(400, "n must be a positive integer", "invalid_request_error", "invalid_value")
    return params


def _message(message: Any) -> dict[str, str]:
    """A {role, content} dict with text content ("developer" becomes "system")."""
    if not isinstance(message, dict) or "role" not in message:
        raise _HTTPError(400, "each message needs a role", "invalid_request_error", "invalid_value")
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    role = "system" if message["role"] == "developer" else str(message["role"])
    return {"role": role, "content": str(content)}


# -- HTTP plumbing ----------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # never wait for abandoned "slow" or in-flight answers on close

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about clients that hung up (timeouts); report anything else."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    chat: ChatServer  # set on the per-server subclass
    server_version = "memrisk-chat-test/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        """No per-request logging."""

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            model = getattr(self.chat.lm, "name", "local")
            self._send(200, {"object": "list", "data": [
                {"id": model, "object": "model", "created": 0, "owned_by": "memrisk-tests"}]})
        else:
            self._send(404, _HTTPError(404, f"no route {self.path}", "invalid_request_error").body)

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, _HTTPError(404, f"no route {self.path}", "invalid_request_error").body)
            return
        try:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw or b"null")
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            self._send(400, _HTTPError(400, f"invalid JSON body: {exc}", "invalid_request_error").body)
            return
        auth = self.headers.get("Authorization") or ""
        key = auth[len("Bearer "):].strip() if auth.startswith("Bearer ") else ""
        fault, epoch = self.chat._receive(body, key)
        if not key or (self.chat.api_key is not None and key != self.chat.api_key):
            error = _HTTPError(401, "Incorrect or missing API key (send 'Authorization: Bearer <key>').",
                               "invalid_request_error", "invalid_api_key")
            self._send(error.status, error.body)
            return
        try:
            answer = self.chat._complete(body, fault, epoch, self._client_gone)
        except _HTTPError as error:
            self._send(error.status, error.body, error.headers)
            return
        except Exception as exc:  # a bug in this server: answer 500 and show the traceback
            traceback.print_exc()
            self._send(500, _HTTPError(500, f"test server bug: {exc!r}", "test_server_bug").body)
            return
        if answer is not None:
            self._send(200, answer)

    def _client_gone(self) -> bool:
        """True when the client closed the connection (readable socket with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (ConnectionError, TimeoutError):
            pass  # the client gave up (e.g. its timeout expired)
