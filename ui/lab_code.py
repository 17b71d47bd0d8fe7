"""The lab scripts as text for the teaching pages, their diff, and the warning the old AMP spelling prints."""

from __future__ import annotations

import difflib
from pathlib import Path

from trainer.child_process import run_python

LAB_DIR = Path(__file__).resolve().parents[1] / "lab"
BASELINE_SCRIPT = "fp32_baseline.py"
AMP_SCRIPT = "amp_training.py"

# Teaching strings: the spelling the lab uses (deprecated) and the one to write today.
DEPRECATED_SPELLING = """\
scaler = torch.cuda.amp.GradScaler()
with torch.cuda.amp.autocast():
    outputs = model(inputs)
    loss = criterion(outputs, labels)
"""
CURRENT_SPELLING = """\
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.float16):
    outputs = model(inputs)
    loss = criterion(outputs, labels)
"""
# Just enough to run the old spelling and let PyTorch print its deprecation warnings.
_DEPRECATED_PROBE = """\
import torch
scaler = torch.cuda.amp.GradScaler()
with torch.cuda.amp.autocast():
    pass
"""


def read_script(name: str) -> str:
    return (LAB_DIR / name).read_text()


def script_diff(old: str = BASELINE_SCRIPT, new: str = AMP_SCRIPT, context: int = 2) -> str:
    """A unified diff of two lab scripts, as `diff -u` prints it."""
    return "".join(
        difflib.unified_diff(
            read_script(old).splitlines(keepends=True),
            read_script(new).splitlines(keepends=True),
            fromfile=f"lab/{old}",
            tofile=f"lab/{new}",
            n=context,
        )
    )


def changed_lines(old: str = BASELINE_SCRIPT, new: str = AMP_SCRIPT) -> tuple[int, int]:
    """(lines removed, lines added) between two lab scripts."""
    diff = script_diff(old, new, context=0).splitlines()
    removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    return removed, added


def deprecation_warnings(timeout_s: float = 120) -> list[str]:
    """Run the old `torch.cuda.amp` spelling in a fresh Python and return the FutureWarnings it prints.

    A child process, so the warning is shown even if this process has printed it before.
    """
    done = run_python(["-W", "always::FutureWarning", "-c", _DEPRECATED_PROBE], timeout_s=timeout_s)
    return [line.strip() for line in done.stderr.splitlines() if "FutureWarning" in line]
