"""Keep freed host memory inside the process during CPU training, instead of handing it back every step.

PyTorch's CPU tensors come from the C library's malloc. With glibc's defaults a block of a few megabytes or
more (every activation and gradient of the lab's CNN at batch 256) is mapped fresh from the kernel and
unmapped when freed, so each step touches tens of thousands of new pages and the kernel zero-fills every
one of them: on a 2-core VM measured at a third to two fifths of the step time. Raising glibc's mmap
and trim thresholds makes malloc reuse the same heap memory step after step. The arithmetic is untouched;
only where the bytes come from changes. Each run says whether its process was tuned (see `state()`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from dataclasses import dataclass
from functools import lru_cache

# glibc's mallopt parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Blocks up to 1 GiB come from the reusable heap, and up to 1 GiB of free heap is kept rather than trimmed.
# Freed memory goes back to the system when the process ends; every app job runs in its own process.
MMAP_THRESHOLD_BYTES = 1 << 30
TRIM_THRESHOLD_BYTES = 1 << 30


@dataclass(frozen=True)
class MallocState:
    """Whether this process's host allocator was tuned, in one line a result can carry."""

    tuned: bool
    detail: str


_state = MallocState(False, "default: the C library's own malloc settings")


def state() -> MallocState:
    return _state


def tune_for_training() -> MallocState:
    """Raise glibc's mmap and trim thresholds for this process (idempotent). Where the C library is not
    glibc, or refuses a setting, nothing changes and the returned state says why."""
    global _state
    if _state.tuned:
        return _state
    libc = _glibc()
    if libc is None:
        _state = MallocState(False, "default: not glibc, so malloc's thresholds were left alone")
        return _state
    # Order matters: setting the mmap threshold first also switches off glibc's dynamic threshold.
    applied = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and libc.mallopt(
        _M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES
    )
    if not applied:
        _state = MallocState(False, "default: glibc refused the mallopt thresholds")
        return _state
    gib = 1 << 30
    _state = MallocState(
        True,
        f"tuned: glibc mmap_threshold={MMAP_THRESHOLD_BYTES // gib} GiB, trim_threshold="
        f"{TRIM_THRESHOLD_BYTES // gib} GiB (freed blocks reused, not returned to the kernel each step)",
    )
    return _state


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the kernel now (glibc's malloc_trim). A tuned process keeps freed
    memory resident, so a memory measurement starting here would otherwise see the next run reuse pages that
    earlier work left behind and under-count its growth. False where this is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


@lru_cache(maxsize=1)
def _glibc():
    """The C library with mallopt and malloc_trim typed, or None where it is not glibc (looked up once)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    except (OSError, AttributeError):
        return None
    return libc
