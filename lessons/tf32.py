"""Whether "fp32" convolutions and matmuls really run in fp32, read from the running torch, per mode.

On Ampere-or-newer GPUs cuDNN may run an fp32 convolution on Tensor Cores in TF32 (10 mantissa bits), and PyTorch
allows it by default; fp32 matmuls default to full fp32 since torch 1.12 (PyTorch CUDA semantics notes,
"TensorFloat-32 (TF32) on Ampere (and later) devices"). So the lab's script, which sets no flags, already runs its
convolutions in TF32 there, while this app's "fp32" turns TF32 off and its "fp32-default" leaves the switches as
PyTorch sets them (putting them back if the process changed them). Recent torch spells the switches
`fp32_precision` ("ieee" | "tf32", "none" = inherit from the parent setting); older torch has only `allow_tf32`.
The GPU switches are read as trainer/precision.py records them for every run (the new API where torch has it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

import torch

from trainer.child_process import ChildProcessError, run_python_json
from trainer.errors import TrainerError
from trainer.precision import restore_tf32_defaults, set_tf32, tf32_flags

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


def _inherited(*levels: str) -> str:
    """The first setting that is not "none", walking from the op up to torch.backends; "ieee" at the top."""
    return next((level for level in levels if level != "none"), "ieee")


def read_state(setting: str) -> Tf32State:
    """The switches as they stand in this process: the GPU's as the trainer records them, oneDNN's for the CPU."""
    flags = tf32_flags()
    api = NEW_API if "cudnn_conv_fp32_precision" in flags else LEGACY_API
    cpu_conv = cpu_matmul = "ieee"
    mkldnn = torch.backends.mkldnn
    if api == NEW_API and hasattr(mkldnn, "conv"):
        root = torch.backends.fp32_precision
        cpu_conv = _inherited(mkldnn.conv.fp32_precision, mkldnn.fp32_precision, root)
        cpu_matmul = _inherited(mkldnn.matmul.fp32_precision, mkldnn.fp32_precision, root)
    return Tf32State(
        setting, api,
        cuda_conv="tf32" if flags["cudnn_allow_tf32"] else "ieee",
        cuda_matmul="tf32" if flags["cuda_matmul_allow_tf32"] else "ieee",
        cpu_conv=cpu_conv, cpu_matmul=cpu_matmul,
    )


LAB_DEFAULTS = "the lab's script as written (PyTorch's defaults)"
APP_STRICT = "this app's fp32 and AMP modes (TF32 off)"
APP_TF32 = "this app's tf32 mode"
APP_DEFAULT = "this app's fp32-default mode (PyTorch's defaults, put back after the two above)"


def states_in_this_process() -> list[Tf32State]:
    """PyTorch's defaults, then the switches as the trainer sets them for each mode, fp32-default last, after the
    others changed them (run in a fresh process: it changes them)."""
    states = [read_state(LAB_DEFAULTS)]
    for setting, enabled in ((APP_STRICT, False), (APP_TF32, True)):
        set_tf32(enabled)
        states.append(read_state(setting))
    restore_tf32_defaults()
    states.append(read_state(APP_DEFAULT))
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
