"""The Run page's wording that depends on this server: how each loader and data source is named, and which fp32
is the lab's on this device. No Streamlit here; what a learner may pick is server/offer.py's."""

from __future__ import annotations

from trainer.capabilities import mode_support
from trainer.environment import HardwareReport

LOADER_NAMES = {
    "dataloader": "the lab's DataLoader (PIL, ToTensor, 4 workers)",
    "resident": "resident (whole split on the device, sliced)",
    "lab": "the lab's own harness (its DataLoader forked anew each epoch, a sync every step)",
}
DATA_NAMES = {"cifar10": "CIFAR-10", "synthetic": "synthetic (CIFAR-shaped, generated)"}


def tf32_note(report: HardwareReport) -> str:
    """What this app's "fp32" is beside the lab script's on this device (trainer.capabilities decides whether TF32
    exists here): on a GPU with TF32, strict fp32 against the lab's TF32 convolutions; elsewhere, one line saying
    that the two are the same."""
    if mode_support(report.facts).same_as.get("fp32-default") == "fp32":
        device = "a CPU" if report.device_type == "cpu" else f"this GPU (compute capability {report.compute_capability})"
        return (f"On {device} there is no TF32, so this app's fp32 and fp32 as PyTorch defaults (the lab's baseline) "
                "are the same arithmetic here.")
    return (
        "**fp32 in this app is strict fp32**: TF32 off for convolutions and matmuls. The lab's script as written sets "
        "no TF32 switches, so on this GPU (Ampere or newer) its fp32 convolutions run in TF32, as PyTorch lets cuDNN "
        "do by default. **fp32-default** (fp32 as PyTorch defaults) is the lab's baseline: pick it as the mode to "
        "compare to see what those TF32 convolutions gain over strict fp32; AMP's speedup over strict fp32 is larger "
        "than over the lab's baseline by about that much."
    )
