"""The roofline of the lab's model: each layer's FLOPs and bytes in one training step, from its shapes, and so its
arithmetic intensity (FLOPs per byte). Set against a device's peak arithmetic rate and memory bandwidth, a layer
whose intensity is below the ridge (peak / bandwidth) is bound by its bytes: a faster arithmetic cannot speed it
up, only fewer bytes can (16-bit activations halve them). One above the ridge is bound by its arithmetic, which
16-bit Tensor Cores do faster.

The bytes are a lower bound, counted the way a roofline counts them: every tensor a layer's forward or backward
kernel reads or writes, moved once per kernel (no cache reuse between kernels, none lost inside one). Element
sizes follow the mode: fp32 everywhere without AMP; under autocast the convolutions and linear layers, and so the
ReLU and pooling after them, run on 16-bit tensors (the input is cast once), the loss and the weights' master copy
and gradients stay fp32, and max-pooling keeps int64 indices for its backward in either mode. The FLOPs are the
same count as trainer/model.step_flops (tested equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from trainer.precision import default_tf32

FP32, HALF, INDEX = 4, 2, 8  # bytes per element: fp32, fp16/bf16, int64 (max-pool's indices)
CLASSES = 10


@dataclass(frozen=True)
class LayerCost:
    """One layer's work in one training step (forward and backward), for one precision mode."""

    name: str
    kind: str  # "conv" or "linear" (matrix products: on Tensor Cores under AMP), or "memory" (everything else)
    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (0 for a layer that does no counted arithmetic)."""
        return self.flops / self.bytes if self.bytes else 0.0


def layer_costs(width: int, batch_size: int, sixteen_bit: bool) -> list[LayerCost]:
    """The lab's SimpleCNN layer by layer, forward and backward at `batch_size`, plus the optimizer's update
    (SGD with momentum) and, under AMP (`sixteen_bit`), the casts autocast adds."""
    act = HALF if sixteen_bit else FP32  # activations between the matmul layers
    b = batch_size
    c1, c2, hidden = 32 * width, 64 * width, 512 * width
    image, a1, p1, a2, p2 = 3 * 32 * 32, c1 * 32 * 32, c1 * 16 * 16, c2 * 16 * 16, c2 * 8 * 8
    w_conv1, w_conv2, w_fc1, w_fc2 = c1 * 3 * 9 + c1, c2 * c1 * 9 + c2, p2 * hidden + hidden, hidden * CLASSES + CLASSES
    weights = w_conv1 + w_conv2 + w_fc1 + w_fc2
    layers = [
        _matmul("conv1", "conv", 2 * b * a1 * 3 * 9, b * image, w_conv1, b * a1, act, needs_input_grad=False),
        _relu("relu1", b * a1, act),
        _pool("pool1", b * a1, b * p1, act),
        _matmul("conv2", "conv", 2 * b * a2 * c1 * 9, b * p1, w_conv2, b * a2, act),
        _relu("relu2", b * a2, act),
        _pool("pool2", b * a2, b * p2, act),
        _matmul("fc1", "linear", 2 * b * p2 * hidden, b * p2, w_fc1, b * hidden, act),
        _relu("relu3", b * hidden, act),
        _matmul("fc2", "linear", 2 * b * hidden * CLASSES, b * hidden, w_fc2, b * CLASSES, act),
        # Cross-entropy in fp32 (autocast's fp32 list): reads the logits, writes their gradient.
        LayerCost("loss", "memory", 0, b * CLASSES * (act + FP32 + FP32 + act)),
        # SGD with momentum: read weight, gradient and momentum, write weight and momentum, all fp32.
        LayerCost("optimizer", "memory", 0, 5 * FP32 * weights),
    ]
    if sixteen_bit:
        # The input cast to 16 bits; each weight cast to a 16-bit copy (read 4, write 2 bytes) and its 16-bit
        # gradient added into the fp32 .grad (read 2 + 4, write 4); the scaler's unscale and inf check of the grads.
        layers.append(LayerCost("casts and scaler", "memory", 0,
                                b * image * (FP32 + HALF) + weights * (FP32 + HALF) + weights * (HALF + 2 * FP32)
                                + weights * 3 * FP32))
    return layers


def _matmul(name: str, kind: str, forward_flops: int, inputs: int, weights: int, outputs: int, act: int,
            needs_input_grad: bool = True) -> LayerCost:
    """A convolution or linear layer: forward reads input and weights, writes output; backward reads the output's
    gradient, the saved input and the weights, writes the weights' gradient and (except for the first layer) the
    input's gradient. Two products in backward, one without the input gradient."""
    weight_bytes = weights * act  # the 16-bit copy under AMP, the fp32 weight otherwise
    forward = inputs * act + weight_bytes + outputs * act
    backward = outputs * act + inputs * act + weight_bytes + weight_bytes + (inputs * act if needs_input_grad else 0)
    products = 3 if needs_input_grad else 2
    return LayerCost(name, kind, forward_flops * products, forward + backward)


def _relu(name: str, elements: int, act: int) -> LayerCost:
    """In place: forward reads and writes the activation; backward reads the gradient and the output, writes the
    input's gradient."""
    return LayerCost(name, "memory", 0, elements * act * 2 + elements * act * 3)


def _pool(name: str, inputs: int, outputs: int, act: int) -> LayerCost:
    """2x2 max-pool: forward reads the input, writes the output and its int64 indices; backward writes the whole
    input gradient (zeros, then the maxima's places) from the output's gradient and the indices."""
    forward = inputs * act + outputs * (act + INDEX)
    backward = outputs * (act + INDEX) + inputs * act
    return LayerCost(name, "memory", 0, forward + backward)


def step_bytes(width: int, batch_size: int, sixteen_bit: bool) -> int:
    return sum(layer.bytes for layer in layer_costs(width, batch_size, sixteen_bit))


@dataclass(frozen=True)
class RooflinePoint:
    """A layer placed on a device's roofline: the time its FLOPs need at the peak rate, the time its bytes need at
    the bandwidth, and which of the two bounds it."""

    layer: LayerCost
    arithmetic_s: float
    bytes_s: float

    @property
    def bound_s(self) -> float:
        return max(self.arithmetic_s, self.bytes_s)

    @property
    def bound_by(self) -> str:
        return "arithmetic" if self.arithmetic_s >= self.bytes_s else "bytes"


def place(layers: list[LayerCost], tflops: dict[str, float], gb_per_s: float) -> list[RooflinePoint]:
    """Each layer's two times on a device with these peak rates for its convolutions and its linear layers
    (`tflops` by layer kind: the rate of the arithmetic the mode runs them in) and this memory bandwidth."""
    return [RooflinePoint(layer, layer.flops / (tflops[layer.kind] * 1e12) if layer.flops else 0.0,
                          layer.bytes / (gb_per_s * 1e9)) for layer in layers]


def ridge(peak_tflops: float, gb_per_s: float) -> float:
    """The intensity (FLOPs per byte) above which a layer is bound by arithmetic on this device."""
    return peak_tflops * 1e12 / (gb_per_s * 1e9)


@dataclass(frozen=True)
class RooflineMode:
    """A way to run the step: the arithmetic its convolutions and its linear layers run in, and its activations'
    size (16-bit under AMP)."""

    name: str
    conv: str  # a dtype of the peak tables: fp32 | tf32 | bf16 | fp16
    linear: str
    sixteen_bit: bool = False

    @property
    def rates(self) -> dict[str, str]:
        return {"conv": self.conv, "linear": self.linear}


@lru_cache(maxsize=1)
def roofline_modes() -> tuple[RooflineMode, ...]:
    """Strict fp32, fp32 as the lab's script ran it (PyTorch's own TF32 defaults, read from this torch: convolutions
    in TF32, linear layers in strict fp32 on an Ampere-or-newer GPU), TF32 everywhere, and AMP (bf16)."""
    lab = default_tf32()
    return (RooflineMode("strict fp32", "fp32", "fp32"),
            RooflineMode(LAB_FP32, "tf32" if lab["conv"] else "fp32", "tf32" if lab["matmul"] else "fp32"),
            RooflineMode("TF32", "tf32", "tf32"),
            RooflineMode(AMP, "bf16", "bf16", sixteen_bit=True))


LAB_FP32, AMP = "fp32 as the lab ran it", "AMP"


def roofline_steps(width: int, batch_size: int, tflops: dict[str, float],
                   gb_per_s: float) -> dict[str, list[RooflinePoint]]:
    """Each mode this device has rates for (a CPU has no TF32), its layers placed on the roofline."""
    return {mode.name: place(layer_costs(width, batch_size, mode.sixteen_bit),
                             {kind: tflops[dtype] for kind, dtype in mode.rates.items()}, gb_per_s)
            for mode in roofline_modes() if {mode.conv, mode.linear} <= set(tflops)}


def roofline_rows(steps: dict[str, list[RooflinePoint]]) -> list[dict]:
    """One row per layer: its FLOPs, its bytes in fp32 and under AMP, and in each mode the bound it meets and the
    time that bound allows (0 where a mode has no such layer: the casts are AMP's alone)."""
    modes = list(steps)
    by_mode = {mode: {point.layer.name: point for point in points} for mode, points in steps.items()}
    names = list(dict.fromkeys(point.layer.name for points in steps.values() for point in points))
    rows = []
    for name in names:
        points = {mode: by_mode[mode].get(name) for mode in modes}
        any_point = next(point for point in points.values() if point is not None)
        fp32, amp = by_mode[modes[0]].get(name), by_mode.get(AMP, {}).get(name)
        rows.append({"layer": name, "GFLOP": round(any_point.layer.flops / 1e9, 3),
                     "MB, fp32": round(fp32.layer.bytes / 1e6, 1) if fp32 else 0.0,
                     "MB, AMP": round(amp.layer.bytes / 1e6, 1) if amp else 0.0,
                     **{f"bound, {mode}": point.bound_by if point else "-" for mode, point in points.items()},
                     **{f"time, {mode}": duration(point.bound_s) if point else "-"
                        for mode, point in points.items()}})
    return rows


def duration(seconds: float) -> str:
    """A time in the unit that reads best: µs under a millisecond, ms under a second, else seconds."""
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.1f} ms"
    return f"{seconds * 1e6:,.1f} µs"


def step_s(points: list[RooflinePoint]) -> float:
    """The fastest a step could be: each layer as fast as its bound allows."""
    return sum(point.bound_s for point in points)


def roofline_sentence(steps: dict[str, list[RooflinePoint]]) -> str:
    """What the rows add up to, from the rows alone: each mode's step at these peaks, the best AMP can do against
    fp32 as the lab ran it (strict fp32 where the device has no TF32), and the layer that gains the most."""
    totals = {mode: step_s(points) for mode, points in steps.items()}
    said = ", ".join(f"**{duration(total)}** {'under' if mode == AMP else 'in'} {mode}"
                     for mode, total in totals.items())
    baseline = LAB_FP32 if LAB_FP32 in steps else next(iter(steps))
    sentence = f"Layer by layer at these peaks, a step could take {said}"
    if AMP not in steps:
        return sentence + "."
    before = {point.layer.name: point for point in steps[baseline]}
    gained = max((point for point in steps[AMP] if point.layer.name in before),
                 key=lambda point: before[point.layer.name].bound_s - point.bound_s)
    was = before[gained.layer.name]
    return (sentence + f": from {baseline} to AMP at best **{totals[baseline] / totals[AMP]:.2f}x**, and that only "
            f"if nothing but arithmetic and memory traffic took time. The layer that gains the most is "
            f"{gained.layer.name}, {duration(was.bound_s)} to {duration(gained.bound_s)} (bound by its "
            f"{was.bound_by} in {baseline}, by its {gained.bound_by} under AMP).")
