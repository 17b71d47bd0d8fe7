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

from lessons.roofline import layer_costs, place
from trainer.model import SimpleCNN
from trainer.peaks import DevicePeaks
from trainer.results import LAB_REFERENCE, RunResult

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
# A step is "bound by its arithmetic and bytes" when its roofline time is at least this share of the measured step.
ARITHMETIC_BOUND_SHARE = 0.5
SIXTEEN_BIT_MODES = ("amp-fp16", "amp-bf16", "amp-fp16-unscaled", "fp16-true")


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
    """One run's step against this device's best: its FLOPs and bytes (lessons/roofline.py), the time they need at
    the measured peak rate of the arithmetic each layer ran in and at the measured copy bandwidth, the two taken
    layer by layer (each layer as fast as its bound allows: the roofline), the same at the published peaks where
    the GPU is known, and the step the run measured."""

    label: str
    flops: int
    bytes: int
    step_s: float  # measured: the steady window's time per step (warm-up left out)
    arithmetic_s: float  # the FLOPs at the measured matmul rates
    bytes_s: float  # the bytes at the measured copy bandwidth
    roofline_s: float  # layer by layer, the larger of the two: the fastest this step could be here
    published_s: float | None  # the roofline at the published peaks (a known GPU only)

    @property
    def roofline_share(self) -> float:
        return self.roofline_s / self.step_s

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
    """The budget of one finished run with its device's measured peaks; None without a steady step time or a
    measured rate for the arithmetic the run used."""
    if not result.steady_images_per_s or not peaks.copy_gb_per_s:
        return None
    config = result.config
    layers = layer_costs(config.width, config.batch_size, sixteen_bit=config.precision in SIXTEEN_BIT_MODES)
    tf32_convs = bool(result.environment.get("cudnn_allow_tf32")) and result.environment.get("device_type") == "cuda"
    dtypes = {"conv": matmul_dtype(config.precision, True, tf32_convs),
              "linear": matmul_dtype(config.precision, False, tf32_convs)}

    def rates(table: dict[str, float]) -> dict[str, float] | None:
        found = {kind: table.get(dtype) for kind, dtype in dtypes.items()}
        return found if all(found.values()) else None

    measured = rates(peaks.matmul_tflops)
    if measured is None:
        return None
    points = place(layers, measured, peaks.copy_gb_per_s)
    published = published_peaks(result.environment.get("device_name") or "")
    published_rates = rates(published) if published else None
    published_s = (sum(p.bound_s for p in place(layers, published_rates, published["gb_per_s"]))
                   if published_rates else None)
    return StepBudget(label, sum(layer.flops for layer in layers), sum(layer.bytes for layer in layers),
                      config.batch_size / result.steady_images_per_s, sum(p.arithmetic_s for p in points),
                      sum(p.bytes_s for p in points), sum(p.bound_s for p in points), published_s)


def budget_sentence(budgets: list[StepBudget]) -> str:
    """What the budgets say: how much of each step its arithmetic and its bytes need at this device's measured best,
    and so how much of the step a faster arithmetic, or fewer bytes, could remove."""
    parts = [f"{b.label}: the arithmetic needs {_duration(b.arithmetic_s)} and the bytes {_duration(b.bytes_s)} of a "
             f"{_duration(b.step_s)} step; each layer held to the slower of its two, the step needs at least "
             f"{_duration(b.roofline_s)} ({b.roofline_share:.0%} of it)" for b in budgets]
    sentence = "At this device's measured best rates, " + "; ".join(parts) + "."
    if all(b.roofline_share < ARITHMETIC_BOUND_SHARE for b in budgets):
        rest = max(1 - b.roofline_share for b in budgets)
        sentence += (f" Up to {rest:.0%} of the step is neither: arithmetic and copies running below their peak "
                     "(small or awkwardly shaped products, convolutions done in several passes), waiting for data, "
                     "launches and syncs. Faster 16-bit arithmetic and halved activations can only shrink the part "
                     "they are in, which is why AMP's speedup here cannot approach the ratio of the peak rates.")
    else:
        sentence += (" The arithmetic and the bytes are most of the step here, so what AMP speeds up (16-bit "
                     "arithmetic, half the bytes per activation) shows in the step time.")
    return sentence


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"


def budget_rows(budgets: list[StepBudget]) -> list[dict]:
    """The table under the sentence: per run, its FLOPs and bytes, the step it measured, and what its arithmetic, its
    bytes and the two layer by layer need at the measured (and published) peaks, with the step's share."""
    rows = []
    for b in budgets:
        row = {"Run": b.label, "FLOPs per step": f"{b.flops / 1e9:.2f} GFLOP",
               "Bytes per step": f"{b.bytes / 1e6:.0f} MB",
               "Measured step": _duration(b.step_s), "Arithmetic at peak": _duration(b.arithmetic_s),
               "Bytes at peak": _duration(b.bytes_s),
               "Roofline (layer by layer)": f"{_duration(b.roofline_s)} ({b.roofline_share:.1%})"}
        if b.published_s is not None:
            row["Roofline at the published peaks"] = f"{_duration(b.published_s)} ({b.published_share:.2%})"
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


PROFILE_GAP = 0.2  # a profiled step further than this from the run's steady step may not describe the timed steps


def profile_beside_steady(result: RunResult) -> str | None:
    """The profiled window's step beside the run's steady step, and a warning when they are more than PROFILE_GAP
    apart (the profiler's own cost, a busy machine, or another shape); None without both."""
    if not result.profile or not result.steady_images_per_s:
        return None
    profiled, steady = result.profile["step_s"], result.config.batch_size / result.steady_images_per_s
    gap = profiled / steady - 1
    said = (f"The profiled window's step took {_duration(profiled)}, the run's steady step {_duration(steady)} "
            f"({gap:+.0%})")
    if abs(gap) <= PROFILE_GAP:
        return said + ": the profile describes the step the run timed."
    return (said + f": more than {PROFILE_GAP:.0%} apart, so the profile may not describe the timed steps (the "
            "profiler's own cost, other work on the machine meanwhile, or a different batch shape).")
