"""The profile of a short window of training steps: where a step's time goes, by kind of work.

torch.profiler records every operator of N steps run after the timed training and the accuracy check (so it
disturbs neither); each operator called from Python, and each backward function the autograd engine runs, is put
in one category by its name, with the time it took including what it called. The window's own clock (synchronised
on CUDA) gives the step; what the operators leave uncovered is host time: Python, the loop's bookkeeping, launches.
On CUDA the categories are the host's view too (the host waiting for the GPU is a category of its own), and the
kernel names that ran are kept, each marked as likely Tensor Core work or not by the math type its name spells.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from trainer.loop import StepParts

DATA_SPAN = "amp_lab: wait for data"
GPU_SPAN = "amp_lab: wait for the GPU"
UNCOVERED = "host time not covered by operators"
CATEGORIES = ("matrix products", "elementwise and activations", "pooling", "casts and copies", "loss and scaler",
              "optimizer", "waiting for data", "waiting for the GPU", UNCOVERED)
# Operators known by their exact name (a fragment would catch others: "aten::t" is in "aten::to").
_EXACT = {"aten::t": "matrix products", "aten::mm": "matrix products", "aten::to": "casts and copies",
          "aten::mul": "loss and scaler"}
# Name fragments, checked in this order (the first that matches wins): aten ops called from Python, and the
# autograd engine's "evaluate_function: <Op>Backward0" in backward. The scaler's own ops are named before the
# optimizer's, since both use foreach kernels.
_RULES = (
    ("waiting for data", (DATA_SPAN,)),
    # The host blocked until the GPU caught up: the window's last synchronize, the scaler's inf check (.item()).
    ("waiting for the GPU", (GPU_SPAN, "Synchronize", "_local_scalar_dense", "aten::item")),
    ("loss and scaler", ("cross_entropy", "nll_loss", "log_softmax", "LogSoftmax", "NllLoss", "_amp_", "MulBackward",
                         "unscale", "GradScaler")),
    ("optimizer", ("Optimizer.", "optimizer", "AccumulateGrad", "zero_grad", "_foreach")),
    ("matrix products", ("conv", "Convolution", "addmm", "Addmm", "MmBackward", "matmul", "linear", "TBackward")),
    ("pooling", ("pool", "Pool")),
    ("casts and copies", ("_to_copy", "copy_", "ToCopy", "contiguous", "clone", "flatten", "view", "reshape",
                          "Reshape", "View")),
    ("elementwise and activations", ("relu", "Relu", "threshold", "aten::add", "aten::sub", "aten::div", "sigmoid",
                                     "aten::fill", "aten::zero", "empty", "ones_like")),
)
# A kernel's name says its math type, not whether Tensor Cores ran it: the same architecture prefix or template
# (sm80_, sm90_, xmma) names fp32 FFMA kernels too. So a kernel is likely Tensor Core work when its name spells an
# MMA instruction or tile (hmma, imma, wgmma, tensorop, s16816, h1688, ...) or a Tensor Core input type (tf32, fp16,
# bf16, f16), and never when it spells CUDA-core arithmetic. Hopper's cuBLASLt kernels are "nvjet_" plus three
# letters for their types (hsh: fp16 in, fp32 accumulate, fp16 out; t tf32, b bf16, e fp8; sss: strict fp32).
_CUDA_CORE_KERNEL = re.compile(r"ffma|sgemm|simt")
_TENSOR_CORE_KERNEL = re.compile(r"hmma|imma|wgmma|tensorop|[hsib](884|1688|16816|161616)|tf32|f16"
                                 r"|nvjet_(?:sm\d+_)?[a-z]{0,2}[hbte]")


def likely_tensor_core(kernel: str) -> bool:
    """Whether a GPU kernel's name spells Tensor Core math (a likelihood: names are conventions, not guarantees)."""
    name = kernel.lower()
    return not _CUDA_CORE_KERNEL.search(name) and bool(_TENSOR_CORE_KERNEL.search(name))


def category(name: str) -> str:
    if name in _EXACT:
        return _EXACT[name]
    for found, fragments in _RULES:
        if any(fragment in name for fragment in fragments):
            return found
    return "elementwise and activations"


@dataclass
class StepProfile:
    """A profiled window: per step, seconds by category (they add up to `step_s`), the heaviest operators, and on
    CUDA the kernels that ran with their device time."""

    steps: int
    step_s: float  # the window's wall time per step, the profiler running
    categories: dict[str, float] = field(default_factory=dict)
    top_ops: list[dict] = field(default_factory=list)  # {"name", "category", "s"} per step, heaviest first
    kernels: list[dict] = field(default_factory=list)  # CUDA: {"name", "s", "tensor_cores"} per step

    def to_dict(self) -> dict:
        return asdict(self)


def profile_training(parts: StepParts, batches: Iterable, steps: int, batch_size: int,
                     device: torch.device) -> StepProfile:
    """`steps` more full-size training steps under the profiler, each fetching its batch in the data span."""
    parts = replace(parts, updates=None)  # the window's steps are not the run's: nothing is counted
    parts.model.train()
    source = {"batches": iter(batches)}

    def next_full_batch():
        while True:
            try:
                images, labels = next(source["batches"])
            except StopIteration:
                source["batches"] = iter(batches)  # an epoch boundary inside the window: a new pass over the data
                continue
            if images.shape[0] == batch_size:  # a smaller last batch is another shape: not a steady step
                return images, labels

    def run_step() -> None:
        with record_function(DATA_SPAN):
            images, labels = next_full_batch()
        parts.step(images, labels)

    return profile_window(steps, run_step, device)


def profile_window(steps: int, run_step: Callable[[], None], device: torch.device) -> StepProfile:
    """Run `run_step` `steps` times under torch.profiler and group the time. `run_step` fetches its own batch inside
    `record_function(DATA_SPAN)` so that waiting for data is a category of its own."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    run_step()  # one step before the window: the profiler's own start-up is not a step's cost
    _sync(device)
    with profile(activities=activities) as recorded:
        start = time.perf_counter()
        for _ in range(steps):
            run_step()
        with record_function(GPU_SPAN):
            _sync(device)
        wall = time.perf_counter() - start
    return _grouped(recorded.events(), steps, wall)


def _grouped(events, steps: int, wall_s: float) -> StepProfile:
    totals = dict.fromkeys(CATEGORIES, 0.0)
    by_name: dict[str, float] = {}
    kernels: dict[str, float] = {}
    for event in events:
        if _device_kernel(event):
            kernels[event.name] = kernels.get(event.name, 0.0) + _device_us(event) / 1e6
            continue
        if event.cpu_parent is not None:
            continue  # counted inside its top-level caller
        seconds = event.cpu_time_total / 1e6
        found = category(event.name)
        totals[found] += seconds
        by_name[event.name] = by_name.get(event.name, 0.0) + seconds
    covered = sum(totals.values())
    totals[UNCOVERED] = max(wall_s - covered, 0.0)
    per_step = {name: seconds / steps for name, seconds in totals.items()}
    heaviest = sorted(by_name.items(), key=lambda item: item[1], reverse=True)[:12]
    return StepProfile(
        steps, wall_s / steps, per_step,
        [{"name": name, "category": category(name), "s": seconds / steps} for name, seconds in heaviest],
        [{"name": name, "s": seconds / steps, "tensor_cores": likely_tensor_core(name)}
         for name, seconds in sorted(kernels.items(), key=lambda item: item[1], reverse=True)[:20]],
    )


def _device_kernel(event) -> bool:
    kind = getattr(event, "device_type", None)
    return kind is not None and kind != torch.autograd.DeviceType.CPU


def _device_us(event) -> float:
    for attribute in ("self_device_time_total", "self_cuda_time_total", "device_time_total", "cuda_time_total"):
        value = getattr(event, attribute, None)
        if value:
            return float(value)
    return 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)

