"""A pytest plugin for step 2 of the GPU kit: keep only the tests that skip without CUDA.

`python -m pytest -p bench.cuda_only tests` selects every test marked the way the suite marks its GPU-only
cases, `skipif(not torch.cuda.is_available(), reason="needs a CUDA ...")` (on the module, the test or a
parameter), and deselects the rest, which the CPU machines already run. A test that skips *on* a GPU
(`skipif(torch.cuda.is_available(), reason="auto uses the GPU here")`) names the GPU too, so the marker's
condition must also be the one of a missing GPU.
"""

from __future__ import annotations

import re

import torch

GPU_ONLY_REASON = re.compile(r"\b(cuda|gpu)\b", re.IGNORECASE)


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
