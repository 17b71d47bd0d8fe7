"""Which dtype every layer of the lab model sees, computes and stores, per precision mode.

One forward and backward pass on a small batch, with forward hooks reading the dtype of each layer's input,
weight and output, and tensor hooks reading the dtype of the gradient that flows back into each output.
AMP modes (autocast) keep fp32 weights and let autocast cast per operation; the "-true" modes convert the
whole model with `.half()` / `.to(torch.bfloat16)`, so there is no fp32 master copy at all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from trainer.capabilities import resolve_device, support_on
from trainer.child_process import ChildProcessError, run_python_json
from trainer.errors import ConfigError, TrainerError
from trainer.model import build_model

# mode -> (autocast dtype or None, dtype the whole model and input are converted to)
TRACE_MODES = {
    "fp32": (None, torch.float32),
    "amp-fp16": (torch.float16, torch.float32),
    "amp-bf16": (torch.bfloat16, torch.float32),
    "fp16-true": (None, torch.float16),
    "bf16-true": (None, torch.bfloat16),
}
MODE_DESCRIPTIONS = {
    "fp32": "plain fp32: every tensor in float32",
    "amp-fp16": "AMP with float16: autocast around the forward pass, fp32 weights",
    "amp-bf16": "AMP with bfloat16: autocast around the forward pass, fp32 weights",
    "fp16-true": "pure half weights: model.half() and half inputs, no autocast (not AMP)",
    "bf16-true": "pure bfloat16 weights: model.to(torch.bfloat16), no autocast (not AMP)",
}


@dataclass
class LayerDtypes:
    """One leaf layer's dtypes in one mode; '-' where the layer has no weight."""

    layer: str  # e.g. "features.0"
    kind: str  # e.g. "Conv2d"
    input_dtype: str
    weight_dtype: str  # the stored parameter (the master copy under autocast)
    output_dtype: str
    weight_grad_dtype: str  # dtype of .grad after backward
    output_grad_dtype: str  # dtype of d loss / d output flowing back into this layer

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AutocastTrace:
    mode: str
    device: str
    layers: list[LayerDtypes] = field(default_factory=list)
    loss_dtype: str = ""
    logits_dtype: str = ""

    def to_rows(self) -> list[dict]:
        return [row.to_dict() for row in self.layers]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "AutocastTrace":
        layers = [LayerDtypes(**row) for row in data.get("layers", [])]
        return cls(data["mode"], data["device"], layers, data.get("loss_dtype", ""), data.get("logits_dtype", ""))


def dtype_name(dtype: torch.dtype | None) -> str:
    """torch.float16 -> 'float16'."""
    return "-" if dtype is None else str(dtype).removeprefix("torch.")


def trace_dtypes(
    mode: str, device: torch.device | str = "cpu", batch_size: int = 8, width: int = 1, seed: int = 0
) -> AutocastTrace:
    """One forward + backward of SimpleCNN in `mode` on `device`, with every leaf layer's dtypes."""
    if mode not in TRACE_MODES:
        raise ConfigError(f"unknown trace mode {mode!r}: choose one of {', '.join(TRACE_MODES)}")
    device = torch.device(device)
    autocast_dtype, model_dtype = TRACE_MODES[mode]
    support_on(resolve_device(str(device))).check(mode)
    model = build_model(width, device, seed=seed).to(model_dtype)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch_size, 3, 32, 32, generator=generator).to(device, model_dtype)
    labels = torch.randint(0, 10, (batch_size,), generator=generator).to(device)

    rows: dict[str, LayerDtypes] = {}
    handles = [
        module.register_forward_hook(_recorder(name, module, rows))
        for name, module in model.named_modules()
        if not list(module.children())
    ]
    autocast = (
        torch.autocast(device_type=device.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    with autocast:
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels)
    loss.backward()  # outside autocast, as the AMP recipe says
    for handle in handles:
        handle.remove()
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if name in rows and isinstance(weight, nn.Parameter):
            rows[name].weight_grad_dtype = dtype_name(weight.grad.dtype)
    return AutocastTrace(
        mode=mode,
        device=device.type,
        layers=list(rows.values()),
        loss_dtype=dtype_name(loss.dtype),
        logits_dtype=dtype_name(logits.dtype),
    )


def available_modes(device: torch.device | str) -> list[str]:
    """The modes this device can trace (bf16 needs native support on a GPU)."""
    support = support_on(resolve_device(str(device)))
    return [mode for mode in TRACE_MODES if support.runs(mode)]


def trace_all(device: torch.device | str = "cpu", batch_size: int = 8) -> list[AutocastTrace]:
    """A trace for every mode the device supports."""
    return [trace_dtypes(mode, device, batch_size) for mode in available_modes(device)]


def trace_all_isolated(device: str, batch_size: int = 8, timeout_s: float = 300,
                       env: dict[str, str] | None = None) -> list[AutocastTrace]:
    """trace_all in a short-lived child process, so a long-lived server never holds a CUDA context of its own
    (`env` pins the child's GPU)."""
    args = ["-m", "lessons.autocast_trace", "--device", device, "--batch-size", str(batch_size)]
    try:
        traced = run_python_json(args, timeout_s=timeout_s, env=env)
    except ChildProcessError as err:
        raise TrainerError(f"the dtype trace on {device} failed ({err})") from None
    return [AutocastTrace.from_dict(item) for item in traced]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print each layer's dtypes per precision mode, as JSON.")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=8, help="images in the one traced batch")
    args = parser.parse_args(argv)
    print(json.dumps([trace.to_dict() for trace in trace_all(args.device, args.batch_size)]))
    return 0


def _recorder(name: str, module: nn.Module, rows: dict[str, LayerDtypes]):
    """A forward hook that fills the row of one layer, and a tensor hook for its output's gradient."""

    def record(module, inputs, output):
        weight = getattr(module, "weight", None)
        row = LayerDtypes(
            layer=name,
            kind=type(module).__name__,
            input_dtype=dtype_name(inputs[0].dtype),
            weight_dtype=dtype_name(weight.dtype) if isinstance(weight, nn.Parameter) else "-",
            output_dtype=dtype_name(output.dtype),
            weight_grad_dtype="-",
            output_grad_dtype="-",
        )
        rows[name] = row

        def record_gradient(grad):
            row.output_grad_dtype = dtype_name(grad.dtype)

        if output.requires_grad:
            output.register_hook(record_gradient)

    return record


if __name__ == "__main__":
    sys.exit(main())


def sixteen_bit_outputs_reason(layers: list[dict]) -> str:
    """Why a traced AMP mode's layers output what they do, in one sentence, from the trace itself: which layers
    autocast ran in 16 bits, and which kept the dtype their input came in."""
    sixteen = ("float16", "bfloat16")
    products = [row["layer"] for row in layers if row["kind"] in ("Conv2d", "Linear")
                and row["output_dtype"] in sixteen]
    followers = [row["layer"] for row in layers if row["kind"] not in ("Conv2d", "Linear")
                 and row["output_dtype"] in sixteen]
    kept = [row["layer"] for row in layers if row["output_dtype"] not in sixteen]
    one = len(followers) == 1
    after = (f"the {len(followers)} layer{'' if one else 's'} after them (ReLU, max-pool) "
             f"compute{'s' if one else ''}")
    sentence = (f"Autocast ran the {len(products)} convolutions and linear layers in 16 bits (its lower-precision "
                f"list), and {after} in the dtype their input comes in, so they output 16 bits too")
    return sentence + (f"; {', '.join(kept)} kept fp32." if kept else ".")
