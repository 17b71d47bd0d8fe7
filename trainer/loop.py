"""The training loop: one step function for every precision mode, the accuracy check, and the epochs around them.

The loop reads no clock and knows no instrument: the run's clock (trainer/clock.py) hands it its epochs and
batches, the meters (trainer/meters.py) and the reporter (trainer/progress.py) are told after each step and epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from trainer.clock import RunClock
from trainer.meters import Meters, UpdateTracker
from trainer.precision import PrecisionPolicy
from trainer.progress import Reporter


def train_step(model, images, labels, optimizer, criterion, policy: PrecisionPolicy, scaler, loss_factor: float = 1.0,
               updates: UpdateTracker | None = None, step: int = 0) -> torch.Tensor:
    """One optimisation step, the same code for every mode: the policy's autocast and scaler are no-ops
    where the mode does not need them. `loss_factor` (RunConfig.loss_factor) multiplies the loss before the backward
    pass; `updates` counts what step number `step` did to the weights. Returns the detached loss, unmultiplied (no
    sync)."""
    optimizer.zero_grad(set_to_none=True)
    with policy.autocast():
        outputs = model(images)
        loss = criterion(outputs, labels)
    # Backward runs outside autocast: each op's backward reuses the dtype its forward chose.
    scaler.scale(loss if loss_factor == 1.0 else loss * loss_factor).backward()
    if updates is not None:
        updates.before_step()
    scaler.step(optimizer)  # skips the update when fp16 gradients overflowed (syncs when the scaler is on)
    if updates is not None:
        updates.after_step(step)
    scaler.update()
    return loss.detach()


@dataclass
class StepParts:
    """What train_step works on besides the batch: one run's model, optimizer, loss, precision and scaler."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    criterion: Callable
    policy: PrecisionPolicy
    scaler: torch.amp.GradScaler
    loss_factor: float = 1.0
    updates: UpdateTracker | None = None  # only when the run tracks its updates

    def step(self, images: torch.Tensor, labels: torch.Tensor, number: int = 0) -> torch.Tensor:
        return train_step(self.model, images, labels, self.optimizer, self.criterion, self.policy, self.scaler,
                          self.loss_factor, self.updates, number)


def train_epochs(parts: StepParts, batches: Iterable, clock: RunClock, meters: Meters, reporter: Reporter) -> None:
    """The timed training: every epoch the clock asks for, every batch it hands over, one step; the meters and the
    reporter told after each step (the mean loss at log points) and at each epoch's end."""
    parts.model.train()
    for _epoch in clock.epochs():
        for at, images, labels in clock.batches(batches):
            loss = parts.step(images, labels, at.global_step)
            reporter.step(at, meters.record(at, loss))
        meters.end_epoch()
        reporter.end_epoch()


def evaluate(model, batches, policy: PrecisionPolicy, *, on_batch: Callable[[int], None] | None = None) -> float:
    """Top-1 accuracy (0..1) over `batches`, computed in the run's precision; `on_batch(i)` after each batch."""
    was_training = model.training
    model.eval()
    correct, total = None, 0
    with torch.inference_mode(), policy.autocast():
        for index, (images, labels) in enumerate(batches, start=1):
            hits = (model(images).argmax(dim=1) == labels).sum()
            correct = hits if correct is None else correct + hits
            total += labels.shape[0]
            if on_batch is not None:
                on_batch(index)
    model.train(was_training)
    if total == 0:
        raise ValueError("evaluate() got no batches")
    return correct.item() / total
