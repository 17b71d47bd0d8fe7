"""What AMP's two fp16 safeguards prevent, read from real runs that go without one of them.

The GradScaler keeps small gradients from underflowing to zero in fp16's backward pass; fp32 master weights keep
small updates from rounding away when they are added to a weight. The safeguards lesson runs amp-fp16 beside
amp-fp16-unscaled (no scaler) and beside fp16-true (the model in fp16, no master copy), counting every step's zero
gradients and unchanged weights (trainer/meters.py's UpdateTracker); this module says what the counts show.
The fp16 arithmetic below is done by torch, so it is the running PyTorch's rounding, not a formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.model import build_model
from trainer.results import RunResult

# A failure "shows" when the unguarded run loses at least this much more than the guarded one:
UNDERFLOW_SHOWN = 0.05  # five more gradient elements in a hundred exactly zero without the scaler
ROUNDING_SHOWN = 0.01  # one update in a hundred (of weights with a nonzero gradient) rounded away



@dataclass(frozen=True)
class FailureReading:
    """One safeguard's measured effect: the share lost with it (`guarded`) and without it (`unguarded`)."""

    safeguard: str  # a key of trainer.config.SAFEGUARD_FAILURES
    guarded: float | None
    unguarded: float | None
    shown: bool  # the failure is plain in these runs (over UNDERFLOW_SHOWN / ROUNDING_SHOWN)
    sentence: str


def underflow_reading(scaled: RunResult, unscaled: RunResult) -> FailureReading:
    """amp-fp16 with its GradScaler (`scaled`) against amp-fp16-unscaled, both with the same loss shrink."""
    guarded, unguarded = scaled.zero_grad_share, unscaled.zero_grad_share
    if guarded is None or unguarded is None:
        return FailureReading("no-scaler", guarded, unguarded, False, "These runs did not count their gradients.")
    lost = unguarded - guarded
    shown = lost >= UNDERFLOW_SHOWN
    shrink = unscaled.config.loss_shrink_log2
    sized = f"with the loss times 2^-{shrink}" if shrink else "at the lab's own loss"
    sentence = (f"{sized}, {unguarded:.1%} of the gradient elements were exactly zero without the scaler and "
                f"{guarded:.1%} with it: ")
    if shown:
        sentence += (f"underflow zeroed about {lost:.1%} of them, and the weights they belonged to learned nothing "
                     "from those steps.")
    else:
        sentence += (f"only {max(lost, 0.0):.2%} more were lost, so at gradients this large fp16 holds almost all of "
                     "them and the scaler is insurance.")
    return FailureReading("no-scaler", guarded, unguarded, shown, sentence[0].upper() + sentence[1:])


def rounding_reading(master: RunResult, pure: RunResult) -> FailureReading:
    """amp-fp16 (fp32 master weights) against fp16-true (the weights themselves in fp16)."""
    guarded, unguarded = master.stalled_update_share, pure.stalled_update_share
    if guarded is None or unguarded is None:
        return FailureReading("no-master-weights", guarded, unguarded, False, "These runs did not count their updates.")
    shown = unguarded - guarded >= ROUNDING_SHOWN
    sentence = (f"With the weights in fp16, {unguarded:.1%} of the updates to weights with a nonzero gradient left "
                f"the weight exactly as it was; with fp32 master weights, {guarded:.3%}.")
    if not shown:
        sentence += " In these few steps the updates were large enough for fp16 to keep most of them."
    return FailureReading("no-master-weights", guarded, unguarded, shown, sentence)


# Each failure mode's count, as its runs' update history names it, and that count in words.
FAILURE_COUNTS = {"amp-fp16-unscaled": ("zero_grad_share", "zero gradients"),
                  "fp16-true": ("stalled_update_share", "updates rounded away")}


def pair_reading(guarded: RunResult, failure: RunResult) -> FailureReading:
    """The reading of a safeguards pair, amp-fp16 beside the run without one of its safeguards."""
    if failure.precision == "amp-fp16-unscaled":
        return underflow_reading(guarded, failure)
    return rounding_reading(guarded, failure)


def final_losses(guarded: RunResult, unguarded: RunResult) -> tuple[float, float] | None:
    """The last logged loss of each run (None where either logged none)."""
    if not guarded.loss_history or not unguarded.loss_history:
        return None
    return guarded.loss_history[-1]["loss"], unguarded.loss_history[-1]["loss"]


def fp16_sum(a: float, b: float) -> float:
    """a + b computed in fp16 by torch: 1 + 1e-4 is 1."""
    return float(torch.tensor(a, dtype=torch.float16) + torch.tensor(b, dtype=torch.float16))


def fp16_spacing(value: float) -> float:
    """The gap from `value` (in fp16) to the next larger fp16 number: an update under half of it rounds away."""
    here = torch.tensor(value, dtype=torch.float16)
    return float(torch.nextafter(here, torch.tensor(float("inf"), dtype=torch.float16)) - here)


def largest_layer_weight() -> tuple[str, float]:
    """The lab model's largest layer (most weights) and the median |weight| in it as freshly initialised: where most
    of the updates land."""
    model = build_model(1, torch.device("cpu"))
    name, weights = max(((name, p) for name, p in model.named_parameters()), key=lambda item: item[1].numel())
    return name, float(weights.detach().abs().median())
