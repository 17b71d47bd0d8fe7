"""The step's budget: why AMP's speedup is what it is. One training step of the lab's model is counted in FLOPs (by
torch's own counter, over a real forward and backward pass on shapes alone) and set against what this device can
do at best (its measured matrix-multiply rate, trainer/peaks.py, and where its GPU is known, the published peak);
what the arithmetic would take at that rate, beside the step the run measured, shows how much of the step AMP's
faster arithmetic can touch at all.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from lessons.roofline import AMP, LAB_FP32, duration, layer_costs, place, roofline_modes, roofline_steps
from lessons.roofline import step_s as roofline_step_s
from trainer.model import flops_by_kind
from trainer.peaks import DevicePeaks
from trainer.precision import matmul_dtype
from trainer.results import LAB_REFERENCE, RunResult

# Published dense peaks (TFLOP/s, no sparsity) and memory bandwidth (GB/s) of each variant, from NVIDIA's datasheets
# (H200: its SXM and NVL columns; H100: the SXM and NVL columns and the H100 PCIe product brief PB-11133; A100 80 GB
# and 40 GB, SXM and PCIe; L4). The datasheets quote Tensor Core rates with sparsity, twice these.
PUBLISHED_PEAKS = {
    "H200 SXM": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.5, "bf16": 989.5, "gb_per_s": 4800.0},
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "gb_per_s": 4800.0},
    "H100 SXM": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.5, "bf16": 989.5, "gb_per_s": 3350.0},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "gb_per_s": 3900.0},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5, "gb_per_s": 2000.0},
    "A100 SXM 80 GB": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "gb_per_s": 2039.0},
    "A100 PCIe 80 GB": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "gb_per_s": 1935.0},
    "A100 40 GB": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "gb_per_s": 1555.0},
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0, "gb_per_s": 300.0},
}
PUBLISHED_SOURCE = "NVIDIA's datasheets, dense (no sparsity)"
# torch's device names ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB") to a variant, the first
# pattern that matches; None: a MIG slice, which has only a share of the GPU's units, so no published figure fits.
_VARIANTS = ((r"\bMIG\b", None), (r"\bH200 NVL\b", "H200 NVL"), (r"\bH200\b", "H200 SXM"),
             (r"\bH100 NVL\b", "H100 NVL"), (r"\bH100 PCIE\b", "H100 PCIe"), (r"\bH100 (80GB HBM3|SXM)", "H100 SXM"),
             (r"\bA100\b.*40GB", "A100 40 GB"), (r"\bA100\b.*PCIE", "A100 PCIe 80 GB"),
             (r"\bA100\b.*SXM", "A100 SXM 80 GB"), (r"\bL4\b", "L4"))
# A step is "bound by its arithmetic and bytes" when its roofline time is at least this share of the measured step.
ARITHMETIC_BOUND_SHARE = 0.5
SIXTEEN_BIT_MODES = ("amp-fp16", "amp-bf16", "amp-fp16-unscaled", "fp16-true")


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
    def peaks_too_low(self) -> bool:
        """A lower bound above the step it bounds: the measured peaks are below what the device did in this step."""
        return self.roofline_s > self.step_s

    @property
    def published_share(self) -> float | None:
        return None if self.published_s is None else self.published_s / self.step_s


def published_variant(device_name: str) -> str | None:
    """The variant of PUBLISHED_PEAKS that torch's name for a GPU is ("NVIDIA H200" is the H200 SXM); None for any
    other device, a MIG slice of a GPU, or a variant whose figures this table lacks (published_note says which)."""
    name = device_name.upper()
    for pattern, variant in _VARIANTS:
        if re.search(pattern, name):
            return variant
    return None


def published_peaks(device_name: str) -> dict[str, float] | None:
    variant = published_variant(device_name)
    return None if variant is None else PUBLISHED_PEAKS[variant]


def published_note(device_name: str) -> str | None:
    """Why an NVIDIA GPU is set against no published peaks (None where it is, or for a CPU)."""
    if "NVIDIA" not in device_name.upper() or published_variant(device_name) is not None:
        return None
    if "MIG" in device_name.upper():
        return f"{device_name} is a MIG slice with a share of the GPU's units: no published peak applies to it"
    return f"this app has no published peaks for the {device_name}: only its measured ones are used"


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


def peaks_provenance(peaks: DevicePeaks, device_name: str) -> str:
    """Where a budget's peaks come from: the device and torch, each rate at the size it reached its plateau, when and
    under what load they were measured, and the published peaks or why there are none."""
    rates = ", ".join(f"{dtype} {tflops:,.3g}" + (f" (at {peaks.matmul_sides[dtype]})" if dtype in peaks.matmul_sides
                                                  else "") for dtype, tflops in peaks.matmul_tflops.items())
    when = (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(peaks.measured_at)) if peaks.measured_at
            else "an unknown day")
    load = peaks.load or {}
    busy = ("" if "other_cpu_share" not in load else f", other processes using {load['other_cpu_share']:.0%} of "
            f"the {load['cores']} CPU cores (load average {load['load_avg_1min']:.1f})")
    note = published_note(device_name)
    published = (f" Published peaks: {PUBLISHED_SOURCE}." if published_peaks(device_name) else
                 f" {note[0].upper()}{note[1:]}." if note else "")
    return (f"FLOPs counted by torch.utils.flop_counter over one forward and backward pass at this run's width and "
            f"batch. Measured peaks on {peaks.device_name} (torch {peaks.torch_version}), {when}{busy}: matrix "
            f"multiply, TFLOP/s: {rates}; memory copy {peaks.copy_gb_per_s:,.3g} GB/s; one tiny operation "
            f"{peaks.launch_us:.3g} µs each, launched back to back. Convolutions are set against the matrix-multiply "
            f"rate, which they can at best reach.{published}")


def peaks_beaten(result: RunResult) -> bool:
    """Whether a finished run's step came in under the lower bound its recorded peaks give it (the budget's own
    test, so the server measures again exactly when a budget would say "too low")."""
    if not result.device_peaks:
        return False
    budget = run_budget("", result, DevicePeaks.from_dict(result.device_peaks))
    return budget is not None and budget.peaks_too_low


def budget_sentence(budgets: list[StepBudget]) -> str:
    """What the budgets say: how much of each step its arithmetic and its bytes need at this device's measured best,
    and so how much of the step a faster arithmetic, or fewer bytes, could remove."""
    low = [b for b in budgets if b.peaks_too_low]
    if low:  # never a lower bound above what it bounds: the peaks are wrong, and the sentence says so
        said = "; ".join(f"{b.label} took {duration(b.step_s)} a step, faster than the {duration(b.roofline_s)} "
                         "these peaks allow" for b in low)
        return (f"This device's peak measurement is too low to judge these steps: {said}. The peaks were measured "
                "below what the device really does (a busy machine while they were measured, or a multiply too "
                "small to reach its best rate), so this server measures them again before its next job; run the "
                "comparison again to see its budget.")
    parts = [f"{b.label}: the arithmetic needs {duration(b.arithmetic_s)} and the bytes {duration(b.bytes_s)} of a "
             f"{duration(b.step_s)} step; each layer held to the slower of its two, the step needs at least "
             f"{duration(b.roofline_s)} ({b.roofline_share:.0%} of it)" for b in budgets]
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


def budget_rows(budgets: list[StepBudget]) -> list[dict]:
    """The table under the sentence: per run, its FLOPs and bytes, the step it measured, and what its arithmetic, its
    bytes and the two layer by layer need at the measured (and published) peaks, with the step's share."""
    rows = []
    for b in budgets:
        row = {"Run": b.label, "FLOPs per step": f"{b.flops / 1e9:.2f} GFLOP",
               "Bytes per step": f"{b.bytes / 1e6:.0f} MB",
               "Measured step": duration(b.step_s), "Arithmetic at peak": duration(b.arithmetic_s),
               "Bytes at peak": duration(b.bytes_s),
               "Roofline (layer by layer)": "above the step: peaks too low" if b.peaks_too_low else
               f"{duration(b.roofline_s)} ({b.roofline_share:.1%})"}
        if b.published_s is not None:
            row["Roofline at the published peaks"] = f"{duration(b.published_s)} ({b.published_share:.2%})"
        rows.append(row)
    return rows


LAB_STEPS = 5 * 196  # the lab's 5 epochs of 50,000 images at batch 256: 196 steps an epoch (the last one short)


@dataclass(frozen=True)
class LabStep:
    """The lab's fp32 step (75 s over its 980 steps, on a Tensor Core GPU it does not name) against a GPU's published
    peaks: its FLOPs by kind of layer, and in each roofline mode the time its arithmetic alone needs and the time
    arithmetic and bytes need layer by layer (lessons/roofline.py)."""

    variant: str
    conv_flops: int
    linear_flops: int
    step_s: float
    arithmetic_s: dict[str, float]  # by roofline mode
    roofline_s: dict[str, float]  # by roofline mode

    @property
    def saved_at_most_s(self) -> float:
        """What AMP could take off the lab's step: all its arithmetic and bytes gain, and nothing else."""
        return self.roofline_s[LAB_FP32] - self.roofline_s[AMP]

    @property
    def speedup_at_most(self) -> float:
        return self.step_s / (self.step_s - self.saved_at_most_s)

    def paragraph(self) -> str:
        """The conclusion the numbers give, in plain words, generated from them."""
        lab, amp = self.roofline_s[LAB_FP32], self.roofline_s[AMP]
        lab_modes = {mode.name: mode for mode in roofline_modes()}[LAB_FP32]
        measured = LAB_REFERENCE["fp32_time_s"], LAB_REFERENCE["amp_time_s"]
        saved = (measured[0] - measured[1]) / LAB_STEPS
        return (
            f"One training step of the lab's model at batch 256, forward and backward, is "
            f"**{(self.conv_flops + self.linear_flops) / 1e9:.2f} GFLOP** (PyTorch's own FLOP counter, on the model "
            f"itself): {self.conv_flops / 1e9:.2f} in the convolutions, {self.linear_flops / 1e9:.2f} in the linear "
            f"layers. The lab measured **{duration(self.step_s)}** a step in fp32 ({measured[0]:.0f} s over its "
            f"{LAB_STEPS} steps), in fp32 as PyTorch defaults it: on an Ampere-or-newer GPU, convolutions in "
            f"{lab_modes.conv.upper()} and linear layers in {'strict fp32' if lab_modes.linear == 'fp32' else 'TF32'}. "
            f"At an {self.variant}'s published dense peaks that arithmetic takes "
            f"**{duration(self.arithmetic_s[LAB_FP32])}**"
            f" (strict fp32: {duration(self.arithmetic_s['strict fp32'])}; TF32 everywhere: "
            f"{duration(self.arithmetic_s['TF32'])}; AMP's bf16: {duration(self.arithmetic_s[AMP])}). With each "
            f"layer's bytes as well (the roofline below), the step could take {duration(lab)} as the lab ran it and "
            f"{duration(amp)} under AMP: **{lab / self.step_s:.2%}** of the lab's step. So AMP's faster arithmetic "
            f"and halved activations can save at most {duration(self.saved_at_most_s)} of its "
            f"{duration(self.step_s)}, a speedup of at most **{self.speedup_at_most:.3f}x**. The lab saved "
            f"{duration(saved)} a step ({measured[0]:.0f} s to {measured[1]:.0f} s, "
            f"{measured[0] / measured[1]:.2f}x): that cannot come from this model's arithmetic or activations, and "
            "its 1.8 GB to 1.1 GB cannot either (Where the memory goes). The rest of the lab's step is everything "
            "else its script times: its DataLoader's four worker processes, a `loss.item()` sync every step, kernel "
            "launches. With the lab's DataLoader, expect about 1.0x; the lab's 1.56x is not explained by this model."
        )


def lab_step_on(variant: str = "H200 SXM") -> LabStep:
    """The lab's step against `variant`'s published peaks (PUBLISHED_PEAKS)."""
    flops = flops_by_kind(1, 256)
    peaks = PUBLISHED_PEAKS[variant]
    steps = roofline_steps(1, 256, peaks, peaks["gb_per_s"])
    return LabStep(variant, flops["conv"], flops["linear"], LAB_REFERENCE["fp32_time_s"] / LAB_STEPS,
                   {mode: sum(point.arithmetic_s for point in points) for mode, points in steps.items()},
                   {mode: roofline_step_s(points) for mode, points in steps.items()})


def tensor_cores_sentence(variant: str = "H200 SXM") -> str:
    """What Tensor Cores do for this model, the same everywhere the app says it: for `variant`, from its peaks."""
    peaks = PUBLISHED_PEAKS[variant]
    return (f"On an Ampere-or-newer GPU the lab's fp32 convolutions already run on Tensor Cores, in TF32 as PyTorch "
            f"defaults them ({peaks['tf32']:g} TFLOP/s dense on an {variant}); 16-bit doubles that rate "
            f"({peaks['bf16']:g}) and multiplies the linear layers', strict fp32 by default ({peaks['fp32']:g}), by "
            f"about {peaks['bf16'] / peaks['fp32']:.0f}. This model's step is not bound by its arithmetic, so those "
            "rates move its step time only a little.")


PROFILE_GAP = 0.2  # a profiled step further than this from the run's steady step may not describe the timed steps


def profile_beside_steady(result: RunResult) -> str | None:
    """The profiled window's step beside the run's steady step, and a warning when they are more than PROFILE_GAP
    apart (the profiler's own cost, a busy machine, or another shape); None without both."""
    if not result.profile or not result.steady_images_per_s:
        return None
    profiled, steady = result.profile["step_s"], result.config.batch_size / result.steady_images_per_s
    gap = profiled / steady - 1
    said = (f"The profiled window's step took {duration(profiled)}, the run's steady step {duration(steady)} "
            f"({gap:+.0%})")
    if abs(gap) <= PROFILE_GAP:
        return said + ": the profile describes the step the run timed."
    return (said + f": more than {PROFILE_GAP:.0%} apart, so the profile may not describe the timed steps (the "
            "profiler's own cost, other work on the machine meanwhile, or a different batch shape).")
