"""Every run in its own fresh process, so memory figures never bleed between runs and a crash stays contained.

Parent: `run_isolated(config)` starts `python -m trainer.isolated`, sends the config as JSON on stdin and reads
JSON lines from the child's stdout:
    {"event": "progress", "progress": {...}}
    {"event": "result", "result": {...}}
    {"event": "error", "kind": "<TrainerError subclass>", "message": "..."}
The child's stderr carries tracebacks; the parent keeps its last lines to explain a crash.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trainer.config import RunConfig
from trainer.errors import TrainerError, one_line
from trainer.progress import Progress
from trainer.results import RunResult

POLL_INTERVAL_S = 0.1
TERMINATE_GRACE_S = 3.0
STDERR_LINES_KEPT = 40
PARENT_POLL_S = 0.2
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


@dataclass
class RunOutcome:
    """How one isolated run ended."""

    config: RunConfig
    status: str  # ok | failed | cancelled
    result: RunResult | None = None
    error: str | None = None  # one line, for a learner
    error_kind: str | None = None  # a TrainerError subclass name, or "crashed"

    def to_dict(self) -> dict:
        """A finished run's settings are its result's: written once, there (a failed run's stand on their own)."""
        return {
            **({"config": self.config.to_dict()} if self.result is None or self.result.config != self.config else {}),
            "status": self.status,
            "result": self.result.to_dict() if self.result is not None else None,
            "error": self.error,
            "error_kind": self.error_kind,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "RunOutcome":
        result = RunResult.from_dict(data["result"]) if data.get("result") is not None else None
        return cls(
            config=RunConfig.from_dict(data["config"], stored=True) if "config" in data else result.config,
            status=data["status"],
            result=result,
            error=data.get("error"),
            error_kind=data.get("error_kind"),
        )


def start_child(env: dict[str, str | None] | None = None) -> subprocess.Popen:
    """A fresh run process: it imports torch and the trainer at once, then waits for its config on stdin."""
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.isolated"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=os.getcwd(),
        env=_child_env(env),
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,  # its own process group, so DataLoader workers can be stopped with it
    )


def run_isolated(
    config: RunConfig,
    on_progress: Callable[[Progress], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    env: dict[str, str | None] | None = None,
    on_spawn: Callable[[int], None] | None = None,
    child: subprocess.Popen | None = None,
) -> RunOutcome:
    """Run `config` in a fresh child process; callbacks run in the caller's thread.

    `env` overrides the child's environment (None removes a variable); `on_spawn(pid)` is called once the
    child has started; `child` is one from `start_child(env)` started ahead (a new one is started if it has
    ended). A cancel terminates the child; a KeyboardInterrupt does too and is re-raised.
    """
    if child is None or child.poll() is not None:
        child = start_child(env)
    events: queue.Queue = queue.Queue()
    stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES_KEPT)
    readers = [
        threading.Thread(target=_read_events, args=(child.stdout, events), daemon=True),
        threading.Thread(target=_read_lines, args=(child.stderr, stderr_tail), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        _send_config(child, config)
        if on_spawn is not None:
            on_spawn(child.pid)
        outcome = _follow(child, config, events, on_progress, should_cancel)
    except BaseException:
        _stop(child)
        raise
    finally:
        _kill_group(child.pid)
        for reader in readers:
            reader.join(timeout=TERMINATE_GRACE_S)
    if outcome is None:
        outcome = _crash_outcome(config, child.returncode, stderr_tail)
    return outcome


def _follow(child, config, events: queue.Queue, on_progress, should_cancel) -> RunOutcome | None:
    """Dispatch the child's events until it exits; None when it ended without saying how. A child that has said how
    its run ended gets TERMINATE_GRACE_S to exit, counted from then: one that hangs at exit, or whose leftover
    DataLoader workers keep its stdout open, is stopped rather than holding its worker (and its cancel) forever."""
    outcome, stdout_open, reported_at = None, True, 0.0
    while True:
        if outcome is not None and time.monotonic() - reported_at > TERMINATE_GRACE_S:
            _stop(child)
            return outcome
        if outcome is None and should_cancel is not None and should_cancel():
            _stop(child)
            return RunOutcome(config, "cancelled", error="the run was cancelled", error_kind="CancelledError")
        if not stdout_open:
            try:
                # A child that has already reported may take a moment to exit, but not forever.
                child.wait(timeout=TERMINATE_GRACE_S if outcome is not None else POLL_INTERVAL_S)
            except subprocess.TimeoutExpired:
                if outcome is None:
                    continue
                _stop(child)
            return outcome
        try:
            event = events.get(timeout=POLL_INTERVAL_S)
        except queue.Empty:
            if child.poll() is not None:
                _kill_group(child.pid)  # orphaned DataLoader workers would hold its stdout open
            continue
        if event is None:
            stdout_open = False
            continue
        kind = event.get("event")
        if kind == "progress" and on_progress is not None:
            on_progress(Progress.from_dict(event["progress"]))
        elif kind == "result":
            outcome, reported_at = RunOutcome(config, "ok", result=RunResult.from_dict(event["result"])), time.monotonic()
        elif kind == "error":
            status = "cancelled" if event.get("kind") == "CancelledError" else "failed"
            outcome = RunOutcome(config, status, error=event.get("message"), error_kind=event.get("kind"))
            reported_at = time.monotonic()


class PrestartedRunner:
    """`run_isolated` with the next run's process already started and its imports done (about 8 s of a CPU
    run's start), one waiting per environment: a job on an idle worker starts training at once."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ready: dict[tuple, subprocess.Popen] = {}
        self._closed = False

    def prestart(self, env: dict[str, str | None] | None = None) -> None:
        """Have a process waiting for the next run in `env` (one per environment, so one per worker)."""
        key = _env_key(env)
        with self._lock:
            waiting = self._ready.get(key)
            if self._closed or (waiting is not None and waiting.poll() is None):
                return
            self._ready[key] = start_child(env)

    def __call__(self, config: RunConfig, env: dict[str, str | None] | None = None, **callbacks) -> RunOutcome:
        with self._lock:
            child = self._ready.pop(_env_key(env), None)
        try:
            return run_isolated(config, env=env, child=child, **callbacks)
        finally:
            self.prestart(env)

    def close(self) -> None:
        """Stop the waiting processes; no new ones are started."""
        with self._lock:
            self._closed = True
            waiting, self._ready = list(self._ready.values()), {}
        for child in waiting:
            _stop(child)
            _kill_group(child.pid)


def _env_key(env: dict[str, str | None] | None) -> tuple:
    return tuple(sorted((env or {}).items(), key=lambda item: item[0]))


def _crash_outcome(config: RunConfig, returncode: int, stderr_tail) -> RunOutcome:
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        how = f"was killed by {name}"
        if name == "SIGKILL":
            how += " (for example when the machine ran out of memory)"
    else:
        how = f"exited with status {returncode} without a result"
    last = one_line(next((line for line in reversed(stderr_tail) if line.strip()), ""))
    message = f"the training process {how}" + (f"; last message: {last}" if last else "")
    return RunOutcome(config, "failed", error=message, error_kind="crashed")


def _child_env(overrides: dict[str, str | None] | None) -> dict[str, str]:
    env = dict(os.environ)
    # The child must import this very package, wherever the parent was started from.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _send_config(child: subprocess.Popen, config: RunConfig) -> None:
    try:
        child.stdin.write(json.dumps(config.to_dict()) + "\n")
        child.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the child died at once; its exit status tells the story


def _read_events(stream, events: queue.Queue) -> None:
    for line in stream:
        if line.startswith("{"):
            try:
                events.put(json.loads(line))
            except json.JSONDecodeError:
                pass
    events.put(None)


def _read_lines(stream, tail: collections.deque) -> None:
    for line in stream:
        tail.append(line.rstrip("\n"))


def _stop(child: subprocess.Popen) -> None:
    """Ask the child to stop, then force it after a grace period."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _kill_group(pgid: int) -> None:
    """Stop anything the child left behind in its process group (DataLoader workers)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _end_with_parent() -> None:
    """End this run and its DataLoader workers when the process that started it is gone (a server killed with
    SIGKILL, a Ray worker killed by a forced cancel): an orphaned run would keep its GPU busy for nobody."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        if os.getpgrp() == os.getpid():  # run_isolated made this process its group's leader
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="amp-lab-parent-watch", daemon=True).start()


def _child_main() -> int:
    _end_with_parent()
    # The protocol owns the real stdout; anything else that prints (a dataset download) goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def send(event: dict) -> None:
        protocol.write(json.dumps(event) + "\n")

    # Imported before the config arrives, so that a process started ahead is ready to train when it comes;
    # the parent side never imports torch.
    from trainer.run import run_training

    try:
        line = sys.stdin.readline()
        if not line:
            return 0  # started ahead and then let go: no run
        config = RunConfig.from_dict(json.loads(line))  # strict: run_training validates it
        result = run_training(config, on_progress=lambda p: send({"event": "progress", "progress": p.to_dict()}))
    except TrainerError as exc:
        send({"event": "error", "kind": type(exc).__name__, "message": str(exc)})
        return 1
    send({"event": "result", "result": result.to_dict()})
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
