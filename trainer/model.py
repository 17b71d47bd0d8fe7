"""The lab's SimpleCNN, with a width multiplier so learners can scale the arithmetic per step, and its FLOPs."""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from trainer.config import WIDTHS
from trainer.errors import ConfigError


class SimpleCNN(nn.Module):
    """Two conv/ReLU/maxpool blocks and two linear layers; width=1 is exactly the lab's model."""

    def __init__(self, width: int = 1, num_classes: int = 10):
        super().__init__()
        if width not in WIDTHS:
            raise ConfigError(f"unknown width {width!r}: choose one of {', '.join(map(str, WIDTHS))}")
        c1, c2, hidden = 32 * width, 64 * width, 512 * width
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(c2 * 8 * 8, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def build_model(width: int, device: torch.device, channels_last: bool = False, seed: int = 0) -> SimpleCNN:
    """A freshly initialised model on `device`; the seed makes fp32 and AMP start from the same weights."""
    torch.manual_seed(seed)
    model = SimpleCNN(width).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@lru_cache(maxsize=32)
def step_flops(width: int, batch_size: int) -> dict[str, int]:
    """FLOPs of one training step (forward, loss, backward) of the lab's model at `width` and `batch_size`, by
    operator, counted by torch.utils.flop_counter on the meta device: shapes only, no arithmetic done."""
    model = SimpleCNN(width).to("meta")
    images = torch.empty(batch_size, 3, 32, 32, device="meta")
    labels = torch.zeros(batch_size, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(images), labels).backward()
    return {str(op): int(flops) for op, flops in counter.get_flop_counts()["Global"].items()}


def flops_by_kind(width: int, batch_size: int) -> dict[str, int]:
    """step_flops summed by the kind of layer that does them: {"conv": ..., "linear": ...}."""
    by_op = step_flops(width, batch_size)
    conv = by_op.get("aten.convolution", 0) + by_op.get("aten.convolution_backward", 0)
    return {"conv": conv, "linear": sum(by_op.values()) - conv}
