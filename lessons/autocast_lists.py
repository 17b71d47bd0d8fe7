"""Which operations autocast runs in 16 bits, which in fp32, and which simply follow their input, per device.

Read from the running torch, not copied from a table: each probe runs once on fp32 inputs and once on 16-bit
inputs inside `torch.autocast`, and the output dtypes say which list the op is on. The lists differ per device
and per torch version (PyTorch AMP docs, "Autocast Op Reference": "CUDA Ops that can autocast to float32" versus
"CPU Ops that can autocast to float32"). The dispatcher also says whether an op has an autocast rule on a device
at all, which needs no such device: that is how a CPU-only server can still show what CUDA does with an op.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch.nn import functional as F

from trainer.capabilities import resolve_device
from trainer.child_process import ChildProcessError, run_python_json
from trainer.errors import ConfigError, TrainerError

LOW = "low precision"  # on the lower-precision list: fp32 inputs come out fp16/bf16
FP32 = "fp32"  # on the fp32 list: 16-bit inputs come out fp32
FOLLOWS = "follows its input"  # on no list: runs in whatever dtype it is given
WIDEST = "widest input"  # an autocast rule runs mixed inputs in the widest of them (the "promote" list)
UNSUPPORTED = "no kernel for this dtype"
NO_RULE = "no rule of its own"  # no autocast kernel for the op on a device (cross_entropy is built of ops that have)
CATEGORIES = (LOW, FP32, FOLLOWS, WIDEST, UNSUPPORTED)
AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}
# The dispatcher says whether CUDA's autocast has a rule for an op, not which: the docs' "CUDA Ops that promote to
# the widest input type" (PyTorch AMP docs, "Autocast Op Reference") run mixed inputs in the widest of them, the
# rest of CUDA's rules for ops outside the 16-bit list cast to fp32.
CUDA_PROMOTE_OPS = frozenset({"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample", "index_put",
                              "scatter_add", "tensordot"})


@dataclass(frozen=True)
class Probe:
    """One op: its name on the page, its ATen name (for the dispatcher) and how to call it on a dtype."""

    name: str
    aten: str
    kind: str  # what sort of op, for grouping on the page
    call: Callable[[torch.dtype, torch.device, bool], torch.Tensor]  # (dtype, device, mixed inputs) -> output


def _t(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return (torch.rand(*shape, generator=generator) + 0.5).to(device, dtype)  # positive: log and cdist are defined


def _labels(device: torch.device) -> torch.Tensor:
    return torch.tensor([0, 3], device=device)


def _binary(fn):
    """A probe with two tensor inputs; `mixed` makes the second one fp32 and the first `dtype`."""
    return lambda d, dev, mixed: fn(_t(2, 4, dtype=d, device=dev), _t(2, 4, dtype=torch.float32 if mixed else d,
                                                                       device=dev))


PROBES = (
    Probe("conv2d", "aten::conv2d", "matrix product",
          lambda d, dev, m: F.conv2d(_t(1, 3, 8, 8, dtype=d, device=dev), _t(4, 3, 3, 3, dtype=d, device=dev))),
    Probe("linear", "aten::linear", "matrix product",
          lambda d, dev, m: F.linear(_t(2, 8, dtype=d, device=dev), _t(4, 8, dtype=d, device=dev))),
    Probe("matmul", "aten::matmul", "matrix product",
          lambda d, dev, m: _t(2, 8, dtype=d, device=dev) @ _t(8, 4, dtype=d, device=dev)),
    Probe("bmm", "aten::bmm", "matrix product",
          lambda d, dev, m: torch.bmm(_t(2, 3, 8, dtype=d, device=dev), _t(2, 8, 4, dtype=d, device=dev))),
    Probe("relu", "aten::relu", "element-wise",
          lambda d, dev, m: F.relu(_t(2, 8, dtype=d, device=dev))),
    Probe("gelu", "aten::gelu", "element-wise",
          lambda d, dev, m: F.gelu(_t(2, 8, dtype=d, device=dev))),
    Probe("exp", "aten::exp", "element-wise",
          lambda d, dev, m: torch.exp(_t(2, 8, dtype=d, device=dev))),
    Probe("log", "aten::log", "element-wise",
          lambda d, dev, m: torch.log(_t(2, 8, dtype=d, device=dev))),
    Probe("max_pool2d", "aten::max_pool2d", "pooling",
          lambda d, dev, m: F.max_pool2d(_t(1, 3, 8, 8, dtype=d, device=dev), 2)),
    Probe("softmax", "aten::softmax.int", "softmax",
          lambda d, dev, m: F.softmax(_t(2, 8, dtype=d, device=dev), dim=1)),
    Probe("log_softmax", "aten::log_softmax.int", "softmax",
          lambda d, dev, m: F.log_softmax(_t(2, 8, dtype=d, device=dev), dim=1)),
    Probe("sum", "aten::sum", "reduction",
          lambda d, dev, m: _t(2, 8, dtype=d, device=dev).sum()),
    Probe("mean", "aten::mean", "reduction",
          lambda d, dev, m: _t(2, 8, dtype=d, device=dev).mean()),
    Probe("cumsum", "aten::cumsum", "reduction",
          lambda d, dev, m: torch.cumsum(_t(2, 8, dtype=d, device=dev), dim=1)),
    Probe("prod", "aten::prod", "reduction",
          lambda d, dev, m: torch.prod(_t(2, 8, dtype=d, device=dev))),
    Probe("layer_norm", "aten::layer_norm", "normalisation",
          lambda d, dev, m: F.layer_norm(_t(2, 8, dtype=d, device=dev), (8,))),
    Probe("group_norm", "aten::group_norm", "normalisation",
          lambda d, dev, m: F.group_norm(_t(2, 4, 3, dtype=d, device=dev), 2)),
    Probe("cross_entropy", "aten::cross_entropy_loss", "loss",
          lambda d, dev, m: F.cross_entropy(_t(2, 8, dtype=d, device=dev), _labels(dev))),
    Probe("nll_loss", "aten::nll_loss", "loss",
          lambda d, dev, m: F.nll_loss(_t(2, 8, dtype=d, device=dev), _labels(dev))),
    Probe("mse_loss", "aten::mse_loss", "loss",
          lambda d, dev, m: F.mse_loss(_t(2, 8, dtype=d, device=dev), _t(2, 8, dtype=d, device=dev))),
    Probe("cdist", "aten::cdist", "distance",
          lambda d, dev, m: torch.cdist(_t(3, 4, dtype=d, device=dev), _t(2, 4, dtype=d, device=dev))),
    Probe("addcmul", "aten::addcmul", "mixed inputs",
          lambda d, dev, m: torch.addcmul(_t(2, 4, dtype=d, device=dev), _t(2, 4, dtype=d, device=dev),
                                          _t(2, 4, dtype=torch.float32 if m else d, device=dev))),
    Probe("stack", "aten::stack", "mixed inputs", _binary(lambda a, b: torch.stack([a, b]))),
)


@dataclass
class OpPolicy:
    """What autocast does with one op on one device, measured."""

    op: str
    kind: str
    device: str  # cpu | cuda
    autocast_dtype: str  # bfloat16 | float16
    from_fp32: str  # output dtype when the inputs are fp32
    from_low: str  # output dtype when the inputs are already 16-bit
    category: str  # one of CATEGORIES
    has_rule: bool  # an autocast kernel is registered for this op on this device

    def to_dict(self) -> dict:
        return asdict(self)


def has_autocast_rule(aten_name: str, device_type: str) -> bool:
    """Whether autocast has its own kernel for an op on a device type (no such device needed)."""
    if device_type not in AUTOCAST_KEYS:
        raise ConfigError(f"autocast lists exist for {', '.join(AUTOCAST_KEYS)}, not {device_type!r}")
    return torch._C._dispatch_has_kernel_for_dispatch_key(aten_name, AUTOCAST_KEYS[device_type])


def _output_dtype(probe: Probe, dtype: torch.dtype, device: torch.device, autocast_dtype: torch.dtype,
                  mixed: bool = False) -> str:
    try:
        with torch.autocast(device.type, dtype=autocast_dtype):
            out = probe.call(dtype, device, mixed)
    except (RuntimeError, NotImplementedError):
        return "-"
    return str(out.dtype).removeprefix("torch.")


def classify(device: torch.device | str = "cpu", autocast_dtype: torch.dtype | None = None) -> list[OpPolicy]:
    """Every probe run under autocast on `device` (bf16 on a CPU, fp16 on a GPU unless told), sorted into lists."""
    device = resolve_device(str(device))
    low = autocast_dtype or (torch.bfloat16 if device.type == "cpu" else torch.float16)
    low_name = str(low).removeprefix("torch.")
    policies = []
    for probe in PROBES:
        rule = has_autocast_rule(probe.aten, device.type)
        from_fp32 = _output_dtype(probe, torch.float32, device, low)
        from_low = _output_dtype(probe, low, device, low)
        if from_fp32 == low_name:
            category = LOW
        elif from_low == "float32":
            category = FP32
        elif from_low == "-":
            category = UNSUPPORTED
        elif rule and probe.kind == "mixed inputs" and _output_dtype(probe, low, device, low, True) == "float32":
            category = WIDEST
        else:
            category = FOLLOWS
        policies.append(OpPolicy(probe.name, probe.kind, device.type, low_name, from_fp32, from_low, category, rule))
    return policies


def rules_on(device_type: str) -> dict[str, bool]:
    """Op name -> whether `device_type` has an autocast rule for it, read from the dispatcher."""
    return {probe.name: has_autocast_rule(probe.aten, device_type) for probe in PROBES}


def cuda_list(op: str, cpu_category: str) -> str:
    """The rule CUDA's autocast has for a probed op, for a page that cannot run CUDA: whether it has one, from this
    torch's dispatcher (NO_RULE: none); which, from the docs' promote list (the 16-bit list is the same on both
    devices)."""
    if not rules_on("cuda")[op]:
        return NO_RULE
    if op in CUDA_PROMOTE_OPS:
        return WIDEST
    return LOW if cpu_category == LOW else FP32


def cuda_rules_for(ops: list[str]) -> dict[str, list[str]]:
    """Of `ops` (all off CPU autocast's 16-bit list), those CUDA's autocast has a rule for, by the list it puts
    them on: FP32 and WIDEST."""
    lists = {op: cuda_list(op, FOLLOWS) for op in ops}
    return {category: [op for op in ops if lists[op] == category] for category in (FP32, WIDEST)}


def ops_in(policies: list[OpPolicy], category: str) -> list[str]:
    return [p.op for p in policies if p.category == category]


def classify_isolated(device: str, timeout_s: float = 300, env: dict[str, str] | None = None) -> list[OpPolicy]:
    """classify() in a short-lived child process, so a long-lived server never holds a CUDA context (`env` pins
    the child's GPU)."""
    try:
        rows = run_python_json(["-m", "lessons.autocast_lists", "--device", device], timeout_s=timeout_s, env=env)
    except ChildProcessError as err:
        raise TrainerError(f"reading autocast's lists on {device} failed ({err})") from None
    return [OpPolicy(**row) for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print what autocast does with each probed op, as JSON.")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args(argv)
    print(json.dumps([p.to_dict() for p in classify(args.device)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
