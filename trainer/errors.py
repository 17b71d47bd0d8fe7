"""Errors a learner can cause; each message is one line that says what to do instead."""

import sys

ONE_LINE_CHARS = 300  # the longest error line a learner is shown (a child's last stderr line can be pages long)


def one_line(what: object, limit: int = ONE_LINE_CHARS) -> str:
    """An error (or any text) as one line of at most `limit` characters; an exception without a message is named
    by its type."""
    text = " ".join(str(what).split())
    if not text and isinstance(what, BaseException):
        text = type(what).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TrainerError(Exception):
    """Base for every user-facing failure of the trainer."""


class ConfigError(TrainerError):
    """A value out of range or an unknown name."""


class UnsupportedModeError(ConfigError):
    """A precision mode this device cannot run (tf32 on CPU, bf16 on an old GPU)."""


class DatasetError(TrainerError):
    """The dataset is missing, cannot be downloaded, or its files are damaged."""


class OutOfMemoryError(TrainerError):
    """A batch that does not fit in device memory."""


class CancelledError(TrainerError):
    """The run was cancelled by its owner."""


# Allocation failures that PyTorch raises as a plain RuntimeError rather than torch.OutOfMemoryError.
OUT_OF_MEMORY_MARKS = (
    "out of memory",  # torch.OutOfMemoryError ("CUDA out of memory") and "CUDA error: out of memory"
    "can't allocate memory",  # the CPU allocator: "DefaultCPUAllocator: can't allocate memory"
    "_ALLOC_FAILED",  # CUDNN_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED
    "unable to find an engine",  # cuDNN's frontend when no algorithm's workspace fits near the limit
)


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is an allocation failure (host or device), whatever type the library raised it as."""
    if isinstance(error, MemoryError):  # NumPy and Python's own allocations
        return True
    torch = sys.modules.get("torch")  # not imported here: the parent side of an isolated run never loads torch
    if torch is not None and isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and any(mark in str(error) for mark in OUT_OF_MEMORY_MARKS)
