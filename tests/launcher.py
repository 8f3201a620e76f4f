"""Start `memrisk` commands as child processes the way a user's shell would, but forked from a server that imported
memrisk once (`tests/killpoint.py --serve`): a fresh interpreter spends about 6 s importing torch, transformers and Ray
before it runs anything. MEMRISK_KILL_EXEC=1 starts every command as its own interpreter instead
(`python tests/killpoint.py EVENT N -- ARGS`, the command a failing test prints)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KILLPOINT = Path(__file__).resolve().parent / "killpoint.py"
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@dataclass
class Child:
    """One started run: its process (group) id and the file holding its output."""

    pid: int
    output: Path
    args: list[str]
    event: str
    n: int

    def running(self) -> bool:
        """Whether the process is alive: not exited (a zombie, not yet waited for, has exited)."""
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z"

    def tail(self) -> str:
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return f"$ python tests/killpoint.py {self.event} {self.n} -- {' '.join(self.args)}\n{text[-3000:]}"


class Launcher:
    """Starts `memrisk ARGS` under tests/killpoint.py, forked from its server or as a new interpreter."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.exec = os.environ.get("MEMRISK_KILL_EXEC") == "1"
        self.env = {**os.environ, **RAY_ENV}
        self.processes: dict[int, subprocess.Popen] = {}
        self.started = 0
        if not self.exec:
            self.server = subprocess.Popen(
                [sys.executable, str(KILLPOINT), "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                env=self.env, cwd=ROOT,
            )
            assert "ready" in (self._answer(180) or {}), "the killpoint server did not start in 180 s"

    def start(self, args: list[str], event: str = "none", n: int = 0, env: dict[str, str] | None = None) -> Child:
        """Start a run that kills itself at the `n`th `event` ('none': never)."""
        self.started += 1
        output = self.logs / f"{self.started:03d}.log"
        if self.exec:
            with output.open("w") as handle:
                process = subprocess.Popen(
                    [sys.executable, str(KILLPOINT), event, str(n), "--", *args], stdout=handle, stderr=subprocess.STDOUT,
                    env={**self.env, **(env or {})}, cwd=ROOT, start_new_session=True,
                )
            self.processes[process.pid] = process
            return Child(process.pid, output, args, event, n)
        self._send({"run": args, "event": event, "n": n, "output": str(output), "env": env or {}})
        return Child(self._answer(30)["pid"], output, args, event, n)

    def kill(self, child: Child) -> None:
        """SIGKILL the run's process group (nothing when it has exited already)."""
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, child: Child, timeout: float = 240) -> int:
        """The run's exit status (minus the signal number when killed); a hung run is killed and fails the test."""
        if self.exec:
            process = self.processes.pop(child.pid)
            try:
                return process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(child)
                process.wait()
                raise AssertionError(f"the run hung for {timeout} s:\n{child.tail()}") from None
        self._send({"wait": child.pid})
        answer = self._answer(timeout)
        if answer is None:
            self.kill(child)
            self._answer(30)
            raise AssertionError(f"the run hung for {timeout} s:\n{child.tail()}")
        return answer["status"]

    def close(self) -> None:
        if not self.exec:
            self.server.stdin.close()
            self.server.wait(30)

    def _send(self, request: dict[str, Any]) -> None:
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()

    def _answer(self, timeout: float) -> dict[str, Any] | None:
        ready, _, _ = select.select([self.server.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.server.stdout.readline()
        assert line, "the killpoint server died"
        return json.loads(line)
