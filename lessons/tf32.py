"""Whether "fp32" convolutions and matmuls really run in fp32, read from the running torch, per mode.

On Ampere-or-newer GPUs cuDNN may run an fp32 convolution on Tensor Cores in TF32 (10 mantissa bits), and PyTorch
allows it by default; fp32 matmuls default to full fp32 since torch 1.12 (PyTorch CUDA semantics notes,
"TensorFloat-32 (TF32) on Ampere (and later) devices"). So the lab's script, which sets no flags, already runs its
convolutions in TF32 there, while this app's "fp32" turns TF32 off. Recent torch spells the switches
`fp32_precision` ("ieee" | "tf32", "none" = inherit from the parent setting); older torch has only `allow_tf32`.
Reading the legacy flags after the new ones were set raises in torch 2.14, so this reads the new ones when present.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

import torch

from trainer.child_process import ChildProcessError, run_python_json
from trainer.errors import TrainerError
from trainer.precision import set_tf32

NEW_API = "fp32_precision"
LEGACY_API = "allow_tf32"


@dataclass
class Tf32State:
    """How fp32 convolutions and matmuls are computed: "ieee" (true fp32) or "tf32" (or "bf16" on oneDNN)."""

    setting: str  # which case this is, in words
    api: str  # fp32_precision | allow_tf32: how this torch spells the switches
    cuda_conv: str
    cuda_matmul: str
    cpu_conv: str  # oneDNN (mkldnn) on the CPU; "ieee" where this torch has no such switch
    cpu_matmul: str

    def to_dict(self) -> dict:
        return asdict(self)


def api() -> str:
    return NEW_API if hasattr(torch.backends.cuda.matmul, NEW_API) else LEGACY_API


def _inherited(*levels: str) -> str:
    """The first setting that is not "none", walking from the op up to torch.backends; "ieee" at the top."""
    return next((level for level in levels if level != "none"), "ieee")


def read_state(setting: str) -> Tf32State:
    """The switches as they stand in this process, through whichever API this torch has."""
    b = torch.backends
    if api() == NEW_API:
        root = b.fp32_precision
        return Tf32State(
            setting, NEW_API,
            cuda_conv=_inherited(b.cudnn.conv.fp32_precision, b.cudnn.fp32_precision, root),
            cuda_matmul=_inherited(b.cuda.matmul.fp32_precision, root),
            cpu_conv=_inherited(b.mkldnn.conv.fp32_precision, b.mkldnn.fp32_precision, root),
            cpu_matmul=_inherited(b.mkldnn.matmul.fp32_precision, b.mkldnn.fp32_precision, root),
        )
    to_name = {True: "tf32", False: "ieee"}
    return Tf32State(setting, LEGACY_API, to_name[bool(b.cudnn.allow_tf32)],
                     to_name[bool(b.cuda.matmul.allow_tf32)], "ieee", "ieee")


LAB_DEFAULTS = "the lab's script as written (PyTorch's defaults)"
APP_STRICT = "this app's fp32 and AMP modes (TF32 off)"
APP_TF32 = "this app's tf32 mode"


def states_in_this_process() -> list[Tf32State]:
    """PyTorch's defaults, then the switches as the trainer sets them (run in a fresh process: it changes them)."""
    states = [read_state(LAB_DEFAULTS)]
    for setting, enabled in ((APP_STRICT, False), (APP_TF32, True)):
        set_tf32(enabled)
        states.append(read_state(setting))
    return states


def states() -> list[Tf32State]:
    """states_in_this_process() in a fresh Python, so the defaults are torch's and this process is left alone."""
    try:
        rows = run_python_json(["-W", "error::UserWarning", "-m", "lessons.tf32"], timeout_s=120)
    except ChildProcessError as err:
        raise TrainerError(f"reading the TF32 switches failed ({err})") from None
    return [Tf32State(**row) for row in rows]


if __name__ == "__main__":
    print(json.dumps([state.to_dict() for state in states_in_this_process()]))
    sys.exit(0)
