"""Real weights, activations and gradients of the lab model after a few fp32 training steps.

The learn pages plot these on fp16/bf16 ranges, so a learner sees where the model's own numbers fall.
A few steps on one small batch on the CPU take a second or two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from trainer.cifar10 import cifar10_available
from trainer.errors import ConfigError
from trainer.images import MEAN, STD
from trainer.loaders import load_split
from trainer.model import build_model

KINDS = ("weights", "activations", "gradients", "activation gradients")
MAX_CAPTURE_BATCH = 1024
MAX_CAPTURE_STEPS = 50
CAPTURE_STEPS = 3  # the pages' capture: the third step from fresh weights, where gradients are still large
MAX_VALUES_PER_LAYER = 200_000


@dataclass
class Capture:
    """Flattened float32 values per layer, captured during the last of `steps` training steps.

    Weights and gradients are complete; activations and their gradients are a uniform sample per layer.
    """

    source: str  # cifar10 | synthetic
    steps: int
    batch_size: int
    width: int
    losses: list[float]  # loss of every step, fp32
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # parameter name -> values
    gradients: dict[str, np.ndarray] = field(default_factory=dict)  # parameter name -> .grad
    activations: dict[str, np.ndarray] = field(default_factory=dict)  # layer name -> output
    activation_gradients: dict[str, np.ndarray] = field(default_factory=dict)  # layer name -> d loss / d output

    def by_kind(self, kind: str) -> dict[str, np.ndarray]:
        """The per-layer arrays of one kind (see KINDS)."""
        if kind not in KINDS:
            raise ConfigError(f"unknown value kind {kind!r}: choose one of {', '.join(KINDS)}")
        return getattr(self, kind.replace(" ", "_"))

    def all_values(self, kind: str) -> np.ndarray:
        """Every value of one kind in one flat array."""
        arrays = list(self.by_kind(kind).values())
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float32)


def magnitude_summary(values: np.ndarray) -> dict:
    """Spread of |value| over the nonzero finite values (zeros cannot sit on a log axis), plus the zero count."""
    flat = np.abs(np.asarray(values, dtype=np.float64).ravel())
    finite = flat[np.isfinite(flat)]
    nonzero = finite[finite > 0]
    summary = {"count": int(flat.size), "zeros": int(finite.size - nonzero.size)}
    if nonzero.size == 0:
        return {**summary, "min": None, "p01": None, "median": None, "p99": None, "max": None}
    p01, median, p99 = np.quantile(nonzero, [0.01, 0.5, 0.99])
    return {**summary, "min": float(nonzero.min()), "p01": float(p01), "median": float(median),
            "p99": float(p99), "max": float(nonzero.max())}


def summaries(capture: Capture) -> list[dict]:
    """One magnitude summary per kind of value, labelled, for plotting beside the format ranges."""
    return [{"kind": kind, **magnitude_summary(capture.all_values(kind))} for kind in KINDS]


def default_source(data_root: str) -> str:
    """CIFAR-10 when its files are already in the data root (no download here), synthetic otherwise."""
    return "cifar10" if cifar10_available(data_root) else "synthetic"


def capture_values(
    source: str = "synthetic",
    data_root: str = "./data",
    steps: int = CAPTURE_STEPS,
    batch_size: int = 256,
    width: int = 1,
    seed: int = 0,
) -> Capture:
    """Train `steps` steps in fp32 on the CPU (lab optimizer and loss) and capture the last step's values."""
    if not 1 <= steps <= MAX_CAPTURE_STEPS:
        raise ConfigError(f"capture steps must be between 1 and {MAX_CAPTURE_STEPS}, got {steps}")
    if not 1 <= batch_size <= MAX_CAPTURE_BATCH:
        raise ConfigError(f"capture batch size must be between 1 and {MAX_CAPTURE_BATCH}, got {batch_size}")
    device = torch.device("cpu")
    split = load_split(source, data_root, train=True, limit=batch_size, seed=seed, download=False)
    images, labels = normalised_batch(split.images, split.labels, device)
    model = build_model(width, device, seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    capture = Capture(source=split.source, steps=steps, batch_size=len(labels), width=width, losses=[])
    for step in range(1, steps + 1):
        optimizer.zero_grad(set_to_none=True)
        last = step == steps
        hooks = _hook_layers(model, capture, seed) if last else []
        loss = criterion(model(images), labels)
        loss.backward()
        for hook in hooks:
            hook.remove()
        if last:
            for name, param in model.named_parameters():
                capture.weights[name] = _flat(param)
                capture.gradients[name] = _flat(param.grad)
        optimizer.step()
        capture.losses.append(float(loss.item()))
    return capture


def normalised_batch(images: np.ndarray, labels: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 HWC images -> float32 NCHW with the lab's Normalize(0.5, 0.5), and int64 labels."""
    x = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    return (x - mean) / std, torch.from_numpy(labels).to(device)


def _hook_layers(model: nn.Module, capture: Capture, sample_seed: int) -> list:
    """Forward hooks on every leaf layer: keep its output and, through a tensor hook, its gradient."""
    handles = []
    for name, module in model.named_modules():
        if list(module.children()):
            continue
        label = f"{name} ({type(module).__name__})"

        def keep_gradient(grad, label=label):
            capture.activation_gradients[label] = _sampled(grad, sample_seed)

        def keep(module, inputs, output, label=label, keep_gradient=keep_gradient):
            capture.activations[label] = _sampled(output, sample_seed)
            if output.requires_grad:
                output.register_hook(keep_gradient)

        handles.append(module.register_forward_hook(keep))
    return handles


def _flat(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().reshape(-1).numpy().copy()


def _sampled(tensor: torch.Tensor, seed: int) -> np.ndarray:
    """At most MAX_VALUES_PER_LAYER values drawn uniformly (with replacement: cheap, same distribution),
    so a capture stays a few MB even though the first conv's activations alone are 8M values."""
    flat = tensor.detach().reshape(-1)
    if flat.numel() > MAX_VALUES_PER_LAYER:
        generator = torch.Generator(device=flat.device).manual_seed(seed)
        flat = flat[torch.randint(flat.numel(), (MAX_VALUES_PER_LAYER,), generator=generator, device=flat.device)]
    return _flat(flat)
