"""A pytest plugin for step 2 of the GPU kit: keep only the tests that skip without CUDA.

`python -m pytest -p bench.cuda_only tests` selects every test marked the way the suite marks its GPU-only
cases, `skipif(not torch.cuda.is_available(), reason="needs a CUDA ...")` (on the module, the test or a
parameter), and deselects the rest, which the CPU machines already run. A test that skips *on* a GPU
(`skipif(torch.cuda.is_available(), reason="auto uses the GPU here")`) names the GPU too, so the marker's
condition must also be the one of a missing GPU.

The kit gives pytest only the files that hold such a marker (`gpu_test_files`), so that a file with no GPU test
that cannot be imported on the GPU machine (one that needs Streamlit, say) is never collected there.

With `--cuda-only-log PATH` the plugin appends a JSON line to PATH as each test starts and as it ends (`read_log`),
so a pytest killed at the step's cap still leaves every finished test's outcome, and names the one it was running.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import torch

GPU_ONLY_REASON = re.compile(r"\b(cuda|gpu)\b", re.IGNORECASE)
# The marker's condition as the suite writes it; the plugin then checks each test's marker for real.
GPU_ONLY_MARK = re.compile(r"skipif\(\s*not\s+torch\.cuda\.is_available\(\)")
BROWSER_TESTS = "browser"  # real-browser tests: never on the GPU machine


def gpu_test_files(tests_dir: Path) -> list[Path]:
    """The test files under `tests_dir` that mark a test (or themselves) as needing a CUDA GPU, in path order."""
    return sorted(
        path for path in Path(tests_dir).rglob("test_*.py")
        if BROWSER_TESTS not in path.relative_to(tests_dir).parts[:-1]
        and GPU_ONLY_MARK.search(path.read_text(encoding="utf-8", errors="replace"))
    )


def is_gpu_only(item, cuda_available: bool) -> bool:
    """True when a skipif marker of `item` skips exactly when no CUDA GPU is there, and says so."""
    return any(
        mark.args and mark.args[0] is (not cuda_available)
        and GPU_ONLY_REASON.search(str(mark.kwargs.get("reason", "")))
        for mark in item.iter_markers("skipif")
    )


def read_log(path: Path) -> list[dict]:
    """The tests a --cuda-only-log names, in the order they started, each as it last stood: {"test", "outcome"
    (passed | failed | skipped | error, or running: started and not ended), "time_s", "message"}."""
    tests: dict[str, dict] = {}  # a test's later line replaces its earlier one, in the place of the first
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):  # a line cut short by the kill
            entry = json.loads(line)
            tests[entry["test"]] = entry
    return list(tests.values())


def pytest_addoption(parser) -> None:
    parser.addoption("--cuda-only-log", default=None, help="append a JSON line here as each test starts and ends")


def pytest_configure(config) -> None:
    path = config.getoption("cuda_only_log")
    if path:
        config.pluginmanager.register(TestLog(Path(path)), "cuda-only-log")


class TestLog:
    """Writes the --cuda-only-log: a line as each test starts, and one with its outcome as it ends."""

    __test__ = False  # not a test class, whatever its name says to pytest

    def __init__(self, path: Path):
        self.path = path

    def write(self, test: str, outcome: str, time_s: float = 0.0, message: str | None = None) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:  # closed at once: a kill loses no finished test
            handle.write(json.dumps({"test": test, "outcome": outcome, "time_s": time_s, "message": message}) + "\n")

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self.write(nodeid, "running")

    def pytest_runtest_logreport(self, report) -> None:
        """A test's outcome as pytest reports it: its call's, an error in its set-up or tear-down, or its skip."""
        if report.when == "call" or report.failed or (report.when == "setup" and report.skipped):
            outcome = report.outcome if report.when == "call" else ("error" if report.failed else "skipped")
            message = str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else None
            self.write(report.nodeid, outcome, round(report.duration, 3), message)


def pytest_collection_modifyitems(config, items) -> None:
    cuda_available = torch.cuda.is_available()
    keep = [item for item in items if is_gpu_only(item, cuda_available)]
    dropped = [item for item in items if not is_gpu_only(item, cuda_available)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
