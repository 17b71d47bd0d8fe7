"""The step's budget: why AMP's speedup is what it is. One training step of the lab's model is counted in FLOPs (by
torch's own counter, over a real forward and backward pass on shapes alone) and set against what this device can
do at best (its measured matrix-multiply rate, trainer/peaks.py, and where its GPU is known, the published peak);
what the arithmetic would take at that rate, beside the step the run measured, shows how much of the step AMP's
faster arithmetic can touch at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from torch.utils.flop_counter import FlopCounterMode

from trainer.model import SimpleCNN
from trainer.peaks import DevicePeaks
from trainer.results import LAB_REFERENCE, RunResult

# Which of the counter's operators are which layer, for the table (the rest: none in this model).
OP_GROUPS = {"aten.convolution": "convolutions, forward", "aten.convolution_backward": "convolutions, backward",
             "aten.addmm": "linear layers, forward", "aten.mm": "linear layers, backward"}
CONVOLUTION_OPS = ("aten.convolution", "aten.convolution_backward")

# Published dense peaks (TFLOP/s, no sparsity) and memory bandwidth (GB/s), from NVIDIA's datasheets: the H200 and
# H100 SXM (TF32 494.7, FP16/BF16 989.5, FP32 67; 4,800 and 3,350 GB/s), the A100 SXM 80 GB (19.5, 156, 312;
# 2,039 GB/s), the L4 (30.3, 60, 121; 300 GB/s). The datasheets quote Tensor Core rates with sparsity, twice these.
PUBLISHED_PEAKS = {
    "H200": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.5, "bf16": 989.5, "gb_per_s": 4800.0},
    "H100": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.5, "bf16": 989.5, "gb_per_s": 3350.0},
    "A100": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "gb_per_s": 2039.0},
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0, "gb_per_s": 300.0},
}
PUBLISHED_SOURCE = "NVIDIA's datasheets, dense (no sparsity)"
# A budget "leaves room" for AMP when the arithmetic at peak is at least this share of the measured step.
ARITHMETIC_BOUND_SHARE = 0.5


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


def shape_flops(width: int, batch_size: int) -> int:
    """The same count from the layer shapes by hand (2 FLOPs per multiply-add), to check the counter: forward, then
    the backward's two products per layer (input gradient and weight gradient), except the first convolution's
    input gradient, which nothing needs."""
    c1, c2, hidden = 32 * width, 64 * width, 512 * width
    conv1 = 2 * batch_size * 32 * 32 * c1 * 3 * 9
    conv2 = 2 * batch_size * 16 * 16 * c2 * c1 * 9
    fc1 = 2 * batch_size * (c2 * 8 * 8) * hidden
    fc2 = 2 * batch_size * hidden * 10
    forward = conv1 + conv2 + fc1 + fc2
    backward = conv1 + 2 * conv2 + 2 * fc1 + 2 * fc2
    return forward + backward


def matmul_dtype(precision: str, convolution: bool, tf32_convs: bool) -> str:
    """The arithmetic a precision mode's convolutions or linear layers run in: 16-bit under AMP; TF32 for tf32, and
    for fp32-default's convolutions where the run had cuDNN's TF32 on; else fp32."""
    if precision in ("amp-fp16", "amp-fp16-unscaled", "fp16-true"):
        return "fp16"
    if precision == "amp-bf16":
        return "bf16"
    if precision == "tf32" or (precision == "fp32-default" and convolution and tf32_convs):
        return "tf32"
    return "fp32"


@dataclass(frozen=True)
class StepBudget:
    """One run's step against this device's best: its FLOPs, the time they need at the measured (and, where known,
    published) peak rate of the arithmetic each layer ran in, and the step the run measured."""

    label: str
    flops: int
    step_s: float  # measured: the steady window's time per step (warm-up left out)
    arithmetic_s: float  # the FLOPs at the measured matmul rates
    published_s: float | None  # the same at the published peaks (a known GPU only)
    rates: dict[str, float]  # TFLOP/s used, by dtype

    @property
    def arithmetic_share(self) -> float:
        return self.arithmetic_s / self.step_s

    @property
    def published_share(self) -> float | None:
        return None if self.published_s is None else self.published_s / self.step_s


def published_peaks(device_name: str) -> dict[str, float] | None:
    """The published peaks of a known GPU by its name ("NVIDIA H200" holds "H200"); None for any other device."""
    for model, peaks in PUBLISHED_PEAKS.items():
        if model in device_name.upper():
            return peaks
    return None


def run_budget(label: str, result: RunResult, peaks: DevicePeaks) -> StepBudget | None:
    """The budget of one finished run with its device's measured peaks; None without a steady step time."""
    if not result.steady_images_per_s:
        return None
    config = result.config
    by_op = step_flops(config.width, config.batch_size)
    tf32_convs = bool(result.environment.get("cudnn_allow_tf32")) and result.environment.get("device_type") == "cuda"
    published = published_peaks(result.environment.get("device_name") or "")

    def seconds(rates: dict[str, float]) -> float | None:
        total = 0.0
        for op, flops in by_op.items():
            rate = rates.get(matmul_dtype(config.precision, op in CONVOLUTION_OPS, tf32_convs))
            if not rate:
                return None
            total += flops / (rate * 1e12)
        return total

    measured = seconds(peaks.matmul_tflops)
    if measured is None:
        return None
    step_s = config.batch_size / result.steady_images_per_s
    return StepBudget(label, sum(by_op.values()), step_s, measured, seconds(published) if published else None,
                      dict(peaks.matmul_tflops))


def budget_sentence(budgets: list[StepBudget]) -> str:
    """What the budgets say, in one or two sentences: how much of each step its arithmetic needs at this device's
    measured best, and so how much of the step a faster arithmetic could remove."""
    parts = [f"{b.label}: the arithmetic needs {_duration(b.arithmetic_s)} of a {_duration(b.step_s)} step "
             f"({b.arithmetic_share:.0%})" for b in budgets]
    sentence = "At this device's measured best matrix-multiply rates, " + "; ".join(parts) + "."
    if all(b.arithmetic_share < ARITHMETIC_BOUND_SHARE for b in budgets):
        rest = max(1 - b.arithmetic_share for b in budgets)
        sentence += (f" Up to {rest:.0%} of the step is something else: arithmetic running below the peak (small or "
                     "awkwardly shaped products, convolutions lowered to several steps), layers that only move "
                     "bytes (ReLU, pooling, the optimizer's update), waiting for data, launches and syncs. Faster "
                     "16-bit arithmetic can only shrink the part it is in, which is why AMP's speedup here cannot "
                     "approach the ratio of the peak rates.")
    else:
        sentence += (" The arithmetic is most of the step here, so a faster arithmetic shows in the step time: "
                     "where the 16-bit rate is higher than fp32's, AMP pays.")
    return sentence


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"


def budget_rows(budgets: list[StepBudget]) -> list[dict]:
    """The table under the sentence: per run, its FLOPs, the step it measured, and what its arithmetic needs at
    the measured (and published) peak rates, with the share of the step that is."""
    rows = []
    for b in budgets:
        row = {"Run": b.label, "FLOPs per step": f"{b.flops / 1e9:.2f} GFLOP", "Measured step": _duration(b.step_s),
               "Arithmetic at the measured peak": f"{_duration(b.arithmetic_s)} ({b.arithmetic_share:.1%})"}
        if b.published_s is not None:
            row["At the published peak"] = f"{_duration(b.published_s)} ({b.published_share:.2%})"
        rows.append(row)
    return rows


LAB_STEPS = 5 * 196  # the lab's 5 epochs of 50,000 images at batch 256: 196 steps an epoch (the last one short)


def lab_step_on(gpu: str) -> tuple[int, float, dict[str, float]]:
    """The lab's step against a GPU's published peaks: its FLOPs (counted), its measured fp32 step (the lab's 75 s
    over its 980 steps, a Tensor Core GPU) and the time the arithmetic needs at `gpu`'s TF32 and 16-bit peaks."""
    flops = sum(step_flops(1, 256).values())
    peaks = PUBLISHED_PEAKS[gpu]
    return flops, LAB_REFERENCE["fp32_time_s"] / LAB_STEPS, {
        dtype: flops / (peaks[dtype] * 1e12) for dtype in ("fp32", "tf32", "bf16")}
