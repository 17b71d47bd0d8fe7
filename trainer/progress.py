"""What a running job reports to whoever watches it (the CLI, the app, a parent process)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trainer.known_fields import from_known_fields

PHASES = ("starting", "loading data", "training", "evaluating", "done")


@dataclass
class Progress:
    """A snapshot of a run in flight; `loss` is set only when a new loss was just logged."""

    phase: str
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
