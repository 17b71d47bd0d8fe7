"""The largest batch per precision that fits in GPU memory: doubling, then bisection, each try in a fresh process."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from trainer.capabilities import resolve_device_type
from trainer.config import RunConfig
from trainer.errors import CancelledError, TrainerError, UnsupportedModeError
from trainer.isolated import run_isolated

# The search never goes past this: two steps of it still fit in the 50,000 training images.
PROBE_CEILING = 16384
PROBE_START = 256
PROBE_MAX_TRIES = 12


def probe_max_batch(
    base_config: RunConfig,
    precisions: Sequence[str],
    should_cancel: Callable[[], bool] | None = None,
    runner: Callable = run_isolated,
) -> dict[str, int]:
    """The largest batch per precision that trains without running out of GPU memory (0 if none fits).

    Each try is two steps in a fresh subprocess; a precision stops at PROBE_CEILING (a batch that fits there may
    not be the real limit: say "at least").
    """
    if resolve_device_type(base_config.device) != "cuda":
        raise UnsupportedModeError(
            "the largest-batch search needs a CUDA GPU; on a CPU the limit is the machine's RAM, not the device's"
        )
    found = {}
    for precision in precisions:

        def fits(batch: int, precision=precision) -> bool:
            outcome = runner(probe_config(base_config, precision, batch), should_cancel=should_cancel)
            if outcome.status == "ok":
                return True
            if outcome.status == "cancelled":
                raise CancelledError("the largest-batch search was cancelled")
            if outcome.error_kind == "OutOfMemoryError":
                return False
            raise TrainerError(f"{precision} at batch {batch} failed for another reason: {outcome.error}")

        found[precision] = largest_fitting(fits)
    return found


def probe_config(base: RunConfig, precision: str, batch_size: int) -> RunConfig:
    """A two-step run at `batch_size`: enough to allocate activations, gradients and optimizer state."""
    return replace(
        base,
        precision=precision,
        batch_size=batch_size,
        epochs=1,
        subset=2 * batch_size,
        test_subset=min(batch_size, 1000),
        warmup_steps=0,
        log_every=1,
        breakdown=False,
    ).validate()


def largest_fitting(
    fits: Callable[[int], bool],
    start: int = PROBE_START,
    ceiling: int = PROBE_CEILING,
    max_tries: int = PROBE_MAX_TRIES,
) -> int:
    """Largest n <= ceiling with fits(n), in at most max_tries calls: the ceiling first (on a large GPU the lab's
    model fits there in every mode, and one fresh process answers what doubling from `start` took seven for), then
    doubling from `start` until a failure, then bisecting.

    Bisection stops once the gap is within 1/32 of the known fit, so the answer is within ~3% of the true limit.
    """
    if fits(ceiling):
        return ceiling
    good, bad, tries, batch = 0, ceiling, 1, start
    while tries < max_tries:
        tries += 1
        if fits(batch):
            good = batch
        else:
            bad = batch
        if bad - good <= max(1, good // 32):
            break
        doubling = good == batch and batch * 2 < bad
        batch = batch * 2 if doubling else (good + bad) // 2
    return good
