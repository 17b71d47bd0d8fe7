"""Which gradient values fp16 loses, with and without a loss scale.

A gradient at or below half of fp16's smallest subnormal (2^-25) becomes zero when cast to fp16 (underflow); one
that reaches 65520 after scaling becomes inf (overflow: up to 65519 it still rounds to 65504, fp16's largest).
Multiplying by a power of two moves every value up the log2 axis without touching its mantissa, which is why loss
scaling uses powers of two.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

FP16_SMALLEST_SUBNORMAL = 2.0**-24
FP16_SMALLEST_NORMAL = 2.0**-14
FP16_MAX = 65504.0
FP16_OVERFLOW = 65520.0  # the midpoint to the next binade: from here on a cast to fp16 gives inf (65519 -> 65504)
MAX_SCALE_EXPONENT = 24  # the page's slider runs over 2^0 .. 2^24


@dataclass
class HistogramBin:
    """Count of nonzero |values| with log2|value| in [log2_low, log2_low + 1)."""

    log2_low: int
    count: int
    fraction: float  # of all nonzero values

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScaleOutcome:
    """What casting `values * scale` to fp16 does to the nonzero values."""

    scale: float
    total: int
    nonzero: int
    underflow: int  # nonzero values that become exactly zero in fp16
    subnormal: int  # values that survive only as fp16 subnormals (fewer significant bits)
    overflow: int  # values that become inf in fp16

    @property
    def underflow_fraction(self) -> float:
        return self.underflow / self.nonzero if self.nonzero else 0.0

    @property
    def subnormal_fraction(self) -> float:
        return self.subnormal / self.nonzero if self.nonzero else 0.0

    @property
    def overflow_fraction(self) -> float:
        return self.overflow / self.nonzero if self.nonzero else 0.0

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "log2_scale": math.log2(self.scale),
            "underflow_fraction": self.underflow_fraction,
            "subnormal_fraction": self.subnormal_fraction,
            "overflow_fraction": self.overflow_fraction,
        }


def flatten(arrays) -> np.ndarray:
    """One flat float64 array from an array or a collection of arrays (e.g. a dict per layer)."""
    if isinstance(arrays, dict):
        arrays = list(arrays.values())
    if isinstance(arrays, np.ndarray):
        return arrays.astype(np.float64, copy=False).ravel()
    if not arrays:
        return np.zeros(0)
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])


def log2_histogram(values) -> list[HistogramBin]:
    """Histogram of |value| in whole powers of two; exact zeros are left out (they cannot underflow)."""
    magnitudes = np.abs(flatten(values))
    magnitudes = magnitudes[(magnitudes > 0) & np.isfinite(magnitudes)]
    if magnitudes.size == 0:
        return []
    exponents = np.floor(np.log2(magnitudes)).astype(np.int64)
    low, high = int(exponents.min()), int(exponents.max())
    counts = np.bincount(exponents - low, minlength=high - low + 1)
    return [
        HistogramBin(log2_low=low + i, count=int(c), fraction=float(c) / magnitudes.size)
        for i, c in enumerate(counts)
    ]


def scale_outcome(values, scale: float = 1.0) -> ScaleOutcome:
    """Multiply by `scale` (exactly, in float64) and cast to fp16, as a scaled backward pass would store them."""
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"the loss scale must be a positive finite number, got {scale}")
    flat = flatten(values)
    finite = flat[np.isfinite(flat)]
    nonzero = finite[finite != 0]
    with np.errstate(over="ignore"):
        in_fp16 = np.abs((nonzero * scale).astype(np.float16))
    return ScaleOutcome(
        scale=float(scale),
        total=int(flat.size),
        nonzero=int(nonzero.size),
        underflow=int(np.count_nonzero(in_fp16 == 0)),
        subnormal=int(np.count_nonzero((in_fp16 > 0) & (in_fp16 < FP16_SMALLEST_NORMAL))),
        overflow=int(np.count_nonzero(np.isinf(in_fp16))),
    )


def scale_sweep(values, max_exponent: int = MAX_SCALE_EXPONENT) -> list[ScaleOutcome]:
    """The outcome at every scale 2^0 .. 2^max_exponent."""
    flat = flatten(values)
    return [scale_outcome(flat, 2.0**k) for k in range(max_exponent + 1)]


def safe_scale_exponents(outcomes: list[ScaleOutcome]) -> list[int]:
    """Exponents k whose scale 2^k overflows nothing and loses the fewest values to underflow."""
    finite = [o for o in outcomes if o.overflow == 0]
    if not finite:
        return []
    least = min(o.underflow for o in finite)
    return [round(math.log2(o.scale)) for o in finite if o.underflow == least]


def default_init_scale() -> float:
    """The loss scale a fresh GradScaler starts from, read from the running torch's own signature (2^16 in every
    torch this project has met)."""
    import inspect

    import torch

    return float(inspect.signature(torch.amp.GradScaler).parameters["init_scale"].default)


def search_skips(peak_gradient: float, start_scale: float, overflow: float = FP16_OVERFLOW) -> int:
    """How many times a scaler starting at `start_scale` must halve before `peak_gradient` times the scale stays
    under fp16's overflow: the skips in a row a run whose largest gradient is that should show at its start."""
    times_over = peak_gradient * start_scale / overflow
    if times_over < 1:
        return 0
    return math.floor(math.log2(times_over)) + 1  # the first halving count that brings it strictly under
