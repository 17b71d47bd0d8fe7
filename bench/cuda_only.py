"""A pytest plugin for step 2 of the GPU kit: keep only the tests that skip without CUDA.

`python -m pytest -p bench.cuda_only tests` selects every test marked the way the suite marks its GPU-only
cases, `skipif(not torch.cuda.is_available(), reason="needs a CUDA ...")` (on the module or the test), and
deselects the rest, which the CPU machines already run.
"""

from __future__ import annotations

import re

GPU_ONLY_REASON = re.compile(r"\b(cuda|gpu)\b", re.IGNORECASE)


def is_gpu_only(item) -> bool:
    """True when a skipif marker of `item` gives a missing CUDA GPU as its reason."""
    return any(GPU_ONLY_REASON.search(str(mark.kwargs.get("reason", ""))) for mark in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config, items) -> None:
    keep = [item for item in items if is_gpu_only(item)]
    dropped = [item for item in items if not is_gpu_only(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
