"""Run the memrisk command line and SIGKILL it at the Nth occurrence of an event (test support).

    python tests/killpoint.py EVENT N -- run CONFIG --out DIR
    python tests/killpoint.py none 0 -- books run CONFIG --out DIR     (no kill)

The process kills its own process group with SIGKILL (itself only when it does not lead its
group), as `os.killpg(pid, SIGKILL)` from outside would, but at a moment no sleep can hit
reliably. Events, counted in this process only:

=================  ==========================================================================
``load``           in `memrisk.runner.load_run_model`, once the model is loaded, before it is returned
``score``          in `memrisk.runner.score_chunk`, once a chunk is scored, before its records are returned
``finish``         in `memrisk.runner.finish_run`, before the summary is computed and written
``write[:TEXT]``   in `memrisk.store.atomic_write_bytes`, after the temporary file is written and
                   fsynced, before the rename (only files whose path contains /TEXT:
                   ``write:records/``, ``write:summary.json``)
``renamed[:TEXT]`` right after that rename (the file is in place; what follows it is not done)
``log``            in `memrisk.store.RequestLog.append`, before the entry is written
``logged``         right after the entry is written and fsynced
``torn-log``       half of the entry's line written and fsynced, as a write cut by the kill leaves it
=================  ==========================================================================

Nothing in memrisk knows about this: the patches live in this process only.

`python tests/killpoint.py --serve` is a fork server for tests: it imports memrisk (torch,
transformers, Ray, the chat SDKs) once, then forks one child per request, each in a session of
its own, running `memrisk.cli.main(ARGS)` under the kill patch, so a kill costs a fork instead
of a 5-second interpreter start. It reads JSON lines on stdin and answers one JSON line each:
``{"run": ARGS, "event": E, "n": N, "output": PATH, "env": {...}}`` → ``{"pid": PID}`` (stdout and
stderr go to PATH; "env" is added to the environment);
``{"wait": PID}`` → ``{"status": S}`` (the exit code, or minus the signal number).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

EVENTS = ("none", "load", "score", "finish", "write", "renamed", "log", "logged", "torn-log")


def die() -> None:
    """SIGKILL this process's group when it leads one (as `os.killpg` from outside), else itself."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def install(event: str, n: int) -> None:
    """Patch memrisk in this process so that it dies at the `n`th `event` (1-based)."""
    kind, _, text = event.partition(":")
    if kind not in EVENTS:
        raise SystemExit(f"killpoint: unknown event {event!r}; one of {', '.join(EVENTS)}")
    if kind == "none":
        return
    if n < 1:
        raise SystemExit("killpoint: N counts from 1")
    import memrisk.distributed
    import memrisk.runner
    import memrisk.store

    seen = [0]
    lock = threading.Lock()

    def hit() -> bool:
        with lock:
            seen[0] += 1
            return seen[0] == n

    def wrap(name: str, before: bool) -> None:
        real = getattr(memrisk.runner, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            if before and hit():
                die()
            result = real(*args, **kwargs)
            if not before and hit():
                die()
            return result

        for owner in (memrisk.runner, memrisk.distributed):
            if getattr(owner, name, None) is real:
                setattr(owner, name, patched)

    if kind in ("load", "score", "finish"):
        name = {"load": "load_run_model", "score": "score_chunk", "finish": "finish_run"}[kind]
        wrap(name, before=kind == "finish")
    elif kind in ("write", "renamed"):
        real_write, real_replace = memrisk.store.atomic_write_bytes, os.replace
        target = threading.local()

        def write(path: Path, data: bytes, *args: Any, **kwargs: Any) -> None:
            target.path = str(path)
            try:
                real_write(path, data, *args, **kwargs)
            finally:
                target.path = None

        def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            mine = getattr(target, "path", None) == str(dst) and f"/{text}" in str(dst)
            if mine and kind == "write" and hit():
                die()
            real_replace(src, dst, *args, **kwargs)
            if mine and kind == "renamed" and hit():
                die()

        memrisk.store.atomic_write_bytes = write
        os.replace = replace
    else:
        real_append = memrisk.store.RequestLog.append

        def append(self: Any, entry: Any) -> None:
            if not hit():
                return real_append(self, entry)
            if kind == "log":
                die()
            if kind == "logged":
                real_append(self, entry)
                die()
            line = (json.dumps(memrisk.store._json_safe(entry), ensure_ascii=False) + "\n").encode("utf-8")
            with open(self.path, "ab") as handle:
                handle.write(line[: len(line) // 2])
                handle.flush()
                os.fsync(handle.fileno())
            die()

        memrisk.store.RequestLog.append = append


def run(args: list[str], event: str, n: int) -> int:
    """`memrisk ARGS` in this process, killed at the `n`th `event`."""
    install(event, n)
    from memrisk import cli

    sys.argv = ["memrisk", *args]
    return cli.main(args)


def warm() -> None:
    """Import what a run imports on first use (the chat SDKs, Ray, the GPT-2 classes of the test
    models) without running any torch operation, so forked children stay sound."""
    for module in ("openai", "ray", "transformers.models.gpt2.modeling_gpt2", "transformers.models.auto.modeling_auto"):
        try:
            __import__(module)
        except ImportError:
            pass


def serve() -> None:
    """The fork server (see the module docstring)."""
    import memrisk.books.run  # noqa: F401  (everything a child needs, imported once here)
    import memrisk.cli  # noqa: F401
    import memrisk.distributed  # noqa: F401
    import memrisk.report.html  # noqa: F401
    import memrisk.runner  # noqa: F401

    warm()
    answer = sys.stdout
    print(json.dumps({"ready": os.getpid()}), file=answer, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "wait" in request:
            _, status = os.waitpid(request["wait"], 0)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            print(json.dumps({"status": code}), file=answer, flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setsid()
                output = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(output, 1)
                os.dup2(output, 2)
                os.close(output)
                sys.stdin.close()
                os.environ.update(request.get("env", {}))
                code = run(request["run"], request["event"], request["n"])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(json.dumps({"pid": pid}), file=answer, flush=True)


def main(argv: list[str]) -> int:
    if argv == ["--serve"]:
        serve()
        return 0
    if len(argv) < 3 or argv[2] != "--":
        raise SystemExit(__doc__)
    return run(argv[3:], argv[0], int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
