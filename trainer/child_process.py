"""Ask a fresh Python for an answer: run it, read the JSON it prints last, and turn any failure into one line.

Used where the asking process must stay clean: a long-lived server that must never hold a CUDA context of its
own, a warning that a process prints only once, a benchmark whose every run needs a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from trainer.errors import TrainerError

REPO_ROOT = Path(__file__).resolve().parent.parent


class ChildProcessError(TrainerError):
    """The child failed, timed out or printed no JSON; the message says which, in one line."""


def run_python(args: list[str], input_text: str | None = None, timeout_s: float = 300,
               env: Mapping[str, str] | None = None, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """`python ARGS` from the repository root (or `cwd`), output captured as text; raises ChildProcessError on a
    timeout. `env` adds to (or overrides) this process's environment, e.g. CUDA_VISIBLE_DEVICES to pin its GPU."""
    try:
        return subprocess.run(
            [sys.executable, *args], input=input_text, capture_output=True, text=True, cwd=cwd,
            timeout=timeout_s, env={**os.environ, **env} if env else None,
        )
    except subprocess.TimeoutExpired:
        raise ChildProcessError(f"timed out after {timeout_s:.0f} s") from None


def run_python_json(args: list[str], input_text: str | None = None, timeout_s: float = 300,
                    env: Mapping[str, str] | None = None):
    """The JSON value on the last line a fresh `python ARGS` printed; ChildProcessError when there is none."""
    done = run_python(args, input_text, timeout_s, env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ChildProcessError(f"exit code {done.returncode}: {tail}")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ChildProcessError(f"the last line it printed is not JSON: {lines[-1][:200]}") from None
