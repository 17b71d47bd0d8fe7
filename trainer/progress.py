"""What a running job reports to whoever watches it (the CLI, the app, a parent process), and their one way back:
asking it to stop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from trainer.config import from_known_fields
from trainer.errors import CancelledError

PROGRESS_INTERVAL_S = 0.25  # at most ~4 progress reports a second between log points


@dataclass(frozen=True)
class Position:
    """Where a training step stands: its epoch, its number within the epoch and within the run (all from 1)."""

    epoch: int
    step: int
    global_step: int


@dataclass
class Progress:
    """A snapshot of a run in flight; `loss` is set only when a new loss was just logged."""

    phase: str  # starting | loading data | training | evaluating | done
    epoch: int = 0  # 1-based; 0 before training starts
    epochs: int = 0
    step: int = 0  # 1-based step within the epoch
    steps_per_epoch: int = 0
    global_step: int = 0
    total_steps: int = 0
    loss: float | None = None
    images_per_s: float | None = None
    eta_s: float | None = None
    elapsed_s: float = 0.0

    @property
    def fraction_done(self) -> float:
        if self.phase == "done":
            return 1.0
        return min(1.0, self.global_step / self.total_steps) if self.total_steps else 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Progress":
        return from_known_fields(cls, data)


class Reporter:
    """Turns the run's events into Progress for `on_progress`, always at log points and phase changes, otherwise at
    most every PROGRESS_INTERVAL_S (host clock only, so a report never forces a device sync); and raises
    CancelledError, at every step and every evaluated batch, once `should_cancel` says so."""

    def __init__(self, on_progress: Callable[[Progress], None] | None, should_cancel: Callable[[], bool] | None,
                 epochs: int, batch_size: int):
        self._callback, self._should_cancel = on_progress, should_cancel
        self._epochs = epochs
        self._images_per_step = batch_size  # an estimate: the last batch of an epoch may be smaller
        self._steps_per_epoch = 0
        self._t_created = self._t_last = time.perf_counter()
        self._t_train: float | None = None
        self._at = Position(0, 0, 0)

    def start_training(self, steps_per_epoch: int) -> None:
        self._steps_per_epoch = steps_per_epoch
        self._t_train = time.perf_counter()

    def step(self, at: Position, loss: float | None) -> None:
        """After a training step; `loss` is the mean just logged (a log point), else None."""
        self._at = at
        self.check_cancel()
        if loss is not None:
            self.phase("training", epoch=at.epoch, step=at.step, global_step=at.global_step, loss=loss)
        else:
            self._maybe("training", epoch=at.epoch, step=at.step, global_step=at.global_step)

    def end_epoch(self) -> None:
        self.phase("training", epoch=self._at.epoch, step=self._at.step, global_step=self._at.global_step)

    def evaluating(self, batch: int | None = None) -> None:
        """When the accuracy check starts (no `batch`), and after each of its batches."""
        if batch is None:
            self.phase("evaluating", epoch=self._epochs, global_step=self._at.global_step)
            return
        self.check_cancel()
        self._maybe("evaluating", epoch=self._epochs, global_step=self._at.global_step)

    def check_cancel(self) -> None:
        if self._should_cancel is not None and self._should_cancel():
            raise CancelledError("the run was cancelled before it finished")

    def _maybe(self, phase: str, **fields) -> None:
        if self._callback is not None and time.perf_counter() - self._t_last >= PROGRESS_INTERVAL_S:
            self.phase(phase, **fields)

    def phase(self, phase: str, *, epoch: int = 0, step: int = 0, global_step: int = 0, loss=None,
              total_steps: int | None = None) -> None:
        """Report now: a phase change, a logged loss, or the end (with the run's real `total_steps`)."""
        if self._callback is None:
            return
        now = self._t_last = time.perf_counter()
        total = self._steps_per_epoch * self._epochs if total_steps is None else total_steps
        rate = eta = None
        if self._t_train is not None and global_step and now > self._t_train:
            steps_per_s = global_step / (now - self._t_train)
            rate = steps_per_s * self._images_per_step
            eta = max(0.0, (total - global_step) / steps_per_s) if phase == "training" else None
        self._callback(Progress(phase=phase, epoch=epoch, epochs=self._epochs, step=step,
                                steps_per_epoch=self._steps_per_epoch, global_step=global_step, total_steps=total,
                                loss=loss, images_per_s=rate, eta_s=eta, elapsed_s=now - self._t_created))
