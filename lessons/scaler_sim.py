"""A step-by-step model of torch.amp.GradScaler's dynamic loss scale.

The rule (the same one PyTorch applies after every step): if any gradient was inf/NaN, the optimizer step is
skipped and the scale is multiplied by `backoff_factor`; otherwise a counter of good steps grows, and after
`growth_interval` good steps in a row the scale is multiplied by `growth_factor`. The scale is a float32.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from lessons.underflow import FP16_OVERFLOW
from trainer.errors import ConfigError

MAX_SIMULATED_STEPS = 100_000


@dataclass
class ScalerSettings:
    """GradScaler's constructor arguments, with its defaults."""

    init_scale: float = 65536.0  # 2^16: deliberately high, so the scaler finds the ceiling by backing off
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def validate(self) -> "ScalerSettings":
        if not 0 < self.init_scale < float(np.finfo(np.float32).max):
            raise ConfigError(f"init scale must be positive and fit in float32, got {self.init_scale}")
        if not self.growth_factor > 1.0:
            raise ConfigError(f"growth factor must be above 1, got {self.growth_factor}")
        if not 0.0 < self.backoff_factor < 1.0:
            raise ConfigError(f"backoff factor must be between 0 and 1, got {self.backoff_factor}")
        interval = self.growth_interval
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ConfigError(f"growth interval must be a whole number of steps, at least 1, got {interval}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScalerStep:
    step: int  # 1-based
    scale_used: float  # the scale the loss was multiplied by in this step
    found_inf: bool
    skipped: bool  # the optimizer step was skipped (always equal to found_inf)
    scale_after: float  # the scale after update(), used by the next step

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScalerTrace:
    settings: ScalerSettings
    steps: list[ScalerStep] = field(default_factory=list)

    @property
    def skipped_steps(self) -> list[int]:
        return [s.step for s in self.steps if s.skipped]

    @property
    def scales_after(self) -> list[float]:
        return [s.scale_after for s in self.steps]

    def to_rows(self) -> list[dict]:
        return [s.to_dict() for s in self.steps]


def simulate(found_inf: Sequence[bool], settings: ScalerSettings | None = None) -> ScalerTrace:
    """Replay a fixed sequence of found-inf flags, one per step."""
    return _run(len(found_inf), lambda step, scale: bool(found_inf[step - 1]), settings)


def simulate_gradients(
    max_abs_grads: Sequence[float],
    settings: ScalerSettings | None = None,
    extra_inf_steps: Sequence[int] = (),
) -> ScalerTrace:
    """Steps whose largest |gradient| overflows fp16 (reaches 65520) once multiplied by the current scale.

    `max_abs_grads[i]` is the largest unscaled gradient magnitude at step i+1; `extra_inf_steps` adds
    inf/NaN gradients at chosen steps whatever the scale (a bad batch, a loss spike).
    """
    extra = set(extra_inf_steps)

    def overflows(step: int, scale: float) -> bool:
        return step in extra or not max_abs_grads[step - 1] * scale < FP16_OVERFLOW

    return _run(len(max_abs_grads), overflows, settings)


def inf_pattern(steps: int, inf_steps: Sequence[int]) -> list[bool]:
    """A list of found-inf flags for `steps` steps, True at the 1-based steps in `inf_steps`."""
    chosen = set(inf_steps)
    return [step in chosen for step in range(1, steps + 1)]


def parse_steps(text: str, steps: int) -> list[int]:
    """Read a learner's list like `3, 10-12, 40` into sorted 1-based step numbers within 1..steps."""
    chosen: set[int] = set()
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                first, last = (int(p) for p in part.split("-", 1))
            else:
                first = last = int(part)
        except ValueError:
            raise ConfigError(f"{part!r} is not a step number: write steps like 3, 10-12, 40") from None
        if not 1 <= first <= last <= steps:
            raise ConfigError(f"step {part} is outside 1..{steps}: pick steps within the simulated run")
        chosen.update(range(first, last + 1))
    return sorted(chosen)


def _run(steps: int, found_inf_at, settings: ScalerSettings | None) -> ScalerTrace:
    settings = (settings or ScalerSettings()).validate()
    if steps > MAX_SIMULATED_STEPS:
        raise ConfigError(f"at most {MAX_SIMULATED_STEPS} steps can be simulated, got {steps}")
    trace = ScalerTrace(settings)
    scale = np.float32(settings.init_scale)
    growth, backoff = np.float32(settings.growth_factor), np.float32(settings.backoff_factor)
    good_steps = 0
    for step in range(1, steps + 1):
        used = scale
        found = found_inf_at(step, float(used))
        if found:
            scale = np.float32(scale * backoff)
            good_steps = 0
        else:
            good_steps += 1
            if good_steps == settings.growth_interval:
                with np.errstate(over="ignore"):
                    grown = np.float32(scale * growth)
                if np.isfinite(grown):  # PyTorch never grows the scale into inf
                    scale = grown
                good_steps = 0
        trace.steps.append(ScalerStep(step, float(used), found, found, float(scale)))
    return trace


@dataclass(frozen=True)
class SkipKinds:
    """Why a real run's GradScaler skipped each step it skipped."""

    search: list[int]  # the first steps, skipped in a row: the search down from a scale that started too high
    probes: list[int]  # right after the scale grew: the higher scale overflowed, and was undone
    larger: list[int]  # at a scale that had been working: a larger gradient than before overflowed it

    @property
    def halvings(self) -> int:
        return len(self.search) + len(self.probes) + len(self.larger)


def classify_skips(start: float, history: Sequence[dict], skipped: Sequence[int]) -> SkipKinds:
    """Sort a run's skipped steps by cause, from its scale history ({"step", "scale"} after each step's update) and
    the scale it started from."""
    scale_after = {point["step"]: point["scale"] for point in history}
    skipped_set = set(skipped)
    search, probes, larger = [], [], []
    for step in sorted(skipped_set):
        if step == 1 or (search and search[-1] == step - 1 and len(search) == step - 1):
            search.append(step)
            continue
        before = scale_after.get(step - 1, start)  # the scale this step used
        earlier = scale_after.get(step - 2, start)
        (probes if before > earlier and step - 1 not in skipped_set else larger).append(step)
    return SkipKinds(search, probes, larger)
