"""A pytest plugin for step 2 of the GPU kit: keep only the tests that skip without CUDA.

`python -m pytest -p bench.cuda_only tests` selects every test marked the way the suite marks its GPU-only
cases, `skipif(not torch.cuda.is_available(), reason="needs a CUDA ...")` (on the module, the test or a
parameter), and deselects the rest, which the CPU machines already run. A test that skips *on* a GPU
(`skipif(torch.cuda.is_available(), reason="auto uses the GPU here")`) names the GPU too, so the marker's
condition must also be the one of a missing GPU.

The kit gives pytest only the files that hold such a marker (`gpu_test_files`), so that a file with no GPU test
that cannot be imported on the GPU machine (one that needs Streamlit, say) is never collected there.
"""

from __future__ import annotations

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


def pytest_collection_modifyitems(config, items) -> None:
    cuda_available = torch.cuda.is_available()
    keep = [item for item in items if is_gpu_only(item, cuda_available)]
    dropped = [item for item in items if not is_gpu_only(item, cuda_available)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
