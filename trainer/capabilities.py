"""What can run here: which device a run uses, and which precision modes that device can run (with the reason,
one line, for every mode it cannot).

The one place for these decisions: the precision policy, the job server, the pages, the hardware report, the
autocast trace and the command line all ask it rather than repeat a rule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from trainer.config import FAILURE_PRECISIONS, PRECISIONS, TRAINING_PRECISIONS
from trainer.errors import ConfigError, TrainerError, UnsupportedModeError

# The modes the autocast trace shows besides the training modes: the whole model cast to 16 bits (not AMP).
WHOLE_MODEL_MODES = ("fp16-true", "bf16-true")
ALL_MODES = tuple(dict.fromkeys(TRAINING_PRECISIONS + WHOLE_MODEL_MODES))
# The modes that compute in fp16 on a CPU, each as slow there as amp-fp16 (CPU_FP16_WARNING).
CPU_FP16_MODES = ("amp-fp16", *FAILURE_PRECISIONS)
DEVICE_TYPES = ("cpu", "cuda")
TF32_MIN_CAPABILITY = (8, 0)  # TF32 Tensor Core math arrived with Ampere (NVIDIA's A100 whitepaper)

# The oldest Linux driver each CUDA major version runs on (NVIDIA's CUDA minor version compatibility table).
MIN_DRIVER_FOR_CUDA = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

CPU_FP16_WARNING = (
    "amp-fp16 on a CPU without AMX-FP16 units (most CPUs; Intel Xeon 6 has them) runs fp16 kernels without hardware "
    "support: expect it to be tens of times slower than fp32 there. Use amp-bf16 on a CPU."
)
# fp16 autocast on a CPU without AMX-FP16 is tens of times slower than fp32, so a server trains it only on this many
# images at most (a minute or two on a CPU), and says so in one message.
CPU_FP16_MAX_IMAGES = 5000
CPU_FP16_SIZE_REFUSAL = (
    "{mode} on a CPU without AMX-FP16 units (most CPUs) is tens of times slower than fp32, so this server runs it "
    "only on at most {limit:,} training images: pick a smaller subset, or amp-bf16"
)
CPU_FP32_DEFAULT_NOTE = (
    "fp32-default computes exactly as fp32 on a CPU: TF32, the only switch it leaves as PyTorch sets it, "
    "exists only on NVIDIA GPUs (compute capability 8.0 or newer)"
)


def resolve_device_type(name: str) -> str:
    """`auto` -> "cuda" when a GPU is visible, else "cpu"; opens no CUDA context (safe in the server)."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    device_type = torch.device(name).type
    if device_type not in DEVICE_TYPES:
        raise UnsupportedModeError(f"device {name!r} is not supported: use auto, cpu or cuda")
    return device_type


def resolve_device(name: str) -> torch.device:
    """"auto" -> the current CUDA GPU if there is one, else the CPU; "cuda" without a GPU is an error."""
    device_type = resolve_device_type(name)
    if device_type == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UnsupportedModeError("no CUDA GPU is visible to this process: use device cpu or auto")
    device = torch.device(name if name != "auto" else "cuda")
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise UnsupportedModeError(f"there is no GPU {index}: this machine has {torch.cuda.device_count()}")
    return torch.device("cuda", index)


def unseen_gpu_note(pynvml=None) -> str | None:
    """One line when the NVIDIA driver sees a GPU that this PyTorch cannot use, else None (no CUDA context).

    A wheel built for a newer CUDA than the driver supports reports no GPU, so `auto` would quietly use the CPU.
    """
    if torch.cuda.is_available():
        return None
    try:
        if pynvml is None:
            import pynvml
        pynvml.nvmlInit()
        count, driver = pynvml.nvmlDeviceGetCount(), pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # no driver library, no GPU, or pynvml's own error types: nothing to say
        return None
    if count == 0:
        return None
    driver = driver.decode() if isinstance(driver, bytes) else driver
    seen = f"the NVIDIA driver {driver} sees {count} GPU{'s' if count > 1 else ''}, but this PyTorch"
    if torch.version.cuda is None:
        return f"{seen} is built without CUDA: runs use the CPU; install a CUDA build of PyTorch"
    needed = MIN_DRIVER_FOR_CUDA.get(int(torch.version.cuda.split(".")[0]))
    update = f"update the driver to {needed} or newer" if needed else "update the driver"
    return f"{seen} (built for CUDA {torch.version.cuda}) cannot use them: runs use the CPU; {update}"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML (and nvidia-smi) names it."""

    index: int  # NVML's number, the one nvidia-smi shows
    uuid: str  # "GPU-..." (a job's child is pinned to it with CUDA_VISIBLE_DEVICES)
    name: str


def visible_gpus(pynvml=None) -> list[GpuInfo]:
    """The GPUs this process may use, from NVML, checked against torch's count; opens no CUDA context.

    CUDA_VISIBLE_DEVICES (indices or UUIDs) narrows the list as it narrows CUDA's. Raises TrainerError when
    NVML cannot be read or does not agree with torch (a MIG-partitioned GPU, for one).
    """
    if not torch.cuda.is_available():
        return []
    try:
        if pynvml is None:
            import pynvml
        pynvml.nvmlInit()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(GpuInfo(index, _text(pynvml.nvmlDeviceGetUUID(handle)), _text(pynvml.nvmlDeviceGetName(handle))))
    except Exception as exc:  # pynvml's own error types, or a missing driver library (OSError)
        raise TrainerError(f"cannot list the GPUs through NVML ({exc})") from None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [entry.strip() for entry in visible.split(",") if entry.strip()]
        gpus = [gpu for gpu in gpus if any(_names(gpu, entry) for entry in wanted)]
    # torch.cuda.device_count() asks NVML too where it can, so it opens no context either.
    if len(gpus) != torch.cuda.device_count():
        raise TrainerError(
            f"NVML lists {len(gpus)} usable GPU(s) and PyTorch {torch.cuda.device_count()}; "
            "jobs cannot be pinned to GPUs by UUID (MIG slices are not supported)"
        )
    return gpus


def _names(gpu: GpuInfo, entry: str) -> bool:
    """Whether a CUDA_VISIBLE_DEVICES entry (an index or a UUID, possibly shortened) names `gpu`."""
    return int(entry) == gpu.index if entry.isdigit() else gpu.uuid.startswith(entry)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class DeviceFacts:
    """The few facts about a device that decide which modes it runs."""

    device_type: str  # cpu | cuda
    compute_capability: str | None = None  # "8.0" on a GPU
    native_bf16: bool = False  # GPU bfloat16 arithmetic without emulation

    @classmethod
    def of(cls, device: torch.device | str) -> "DeviceFacts":
        """Read the facts from torch (on a GPU this opens a CUDA context: keep it out of long-lived servers)."""
        device = torch.device(device)
        if device.type != "cuda":
            return cls(device.type)
        major, minor = torch.cuda.get_device_capability(device)
        return cls("cuda", f"{major}.{minor}", torch.cuda.is_bf16_supported(including_emulation=False))

    @property
    def capability(self) -> tuple[int, int]:
        major, _, minor = (self.compute_capability or "0.0").partition(".")
        return int(major), int(minor or 0)


@dataclass(frozen=True)
class ModeSupport:
    """Which modes one device runs; `refused` gives the reason for each mode it cannot, `warnings` the caveats,
    `same_as` the modes that compute exactly as another mode here (the warning says why), `max_images` the most
    training images a mode too slow here for a whole split may train on."""

    device_type: str
    supported: tuple[str, ...]
    refused: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, str] = field(default_factory=dict)
    same_as: dict[str, str] = field(default_factory=dict)
    max_images: dict[str, int] = field(default_factory=dict)

    def check(self, mode: str) -> None:
        """Raise ConfigError for an unknown mode and UnsupportedModeError (with the reason) for a refused one."""
        if mode not in ALL_MODES:
            raise ConfigError(f"unknown precision {mode!r}: choose one of {', '.join(PRECISIONS)}")
        if mode in self.refused:
            raise UnsupportedModeError(self.refused[mode])

    def runs(self, mode: str) -> bool:
        return mode in self.supported

    def size_refusal(self, mode: str, images: int | None) -> str | None:
        """Why `mode` may not train on `images` training images here (None = the whole split), or None when it may."""
        limit = self.max_images.get(mode)
        if limit is None or (images is not None and images <= limit):
            return None
        return CPU_FP16_SIZE_REFUSAL.format(mode=mode, limit=limit)


def mode_support(facts: DeviceFacts) -> ModeSupport:
    """Every mode of ALL_MODES, sorted into what `facts`' device runs and what it refuses (and why)."""
    refused, warnings, same_as, max_images = {}, {}, {}, {}
    # Where there is no TF32, fp32-default is strict fp32. It still runs there, with a note, rather than being
    # refused: a script or a saved command that names it keeps working on any device, and the note says what ran.
    if facts.device_type == "cpu":
        refused["tf32"] = "tf32 needs an NVIDIA GPU (compute capability 8.0 or newer); this run is on the CPU"
        warnings["amp-fp16"] = CPU_FP16_WARNING
        max_images.update({mode: CPU_FP16_MAX_IMAGES for mode in CPU_FP16_MODES})
        warnings["fp32-default"], same_as["fp32-default"] = CPU_FP32_DEFAULT_NOTE, "fp32"
    elif facts.device_type == "cuda":
        if facts.capability < TF32_MIN_CAPABILITY:
            refused["tf32"] = f"tf32 needs compute capability 8.0 or newer; this GPU has {facts.compute_capability}"
            warnings["fp32-default"] = (f"fp32-default computes exactly as fp32 on this GPU: TF32 needs compute "
                                        f"capability 8.0 or newer, and it has {facts.compute_capability}")
            same_as["fp32-default"] = "fp32"
        if not facts.native_bf16:
            for mode in ("amp-bf16", "bf16-true"):
                refused[mode] = f"{mode} needs a GPU with native bfloat16 (Ampere or newer): use the fp16 modes"
    else:
        reason = f"device {facts.device_type!r} is not supported: use cpu or cuda"
        refused.update({mode: reason for mode in ALL_MODES})
    supported = tuple(mode for mode in ALL_MODES if mode not in refused)
    return ModeSupport(facts.device_type, supported, refused, warnings, same_as, max_images)


def support_on(device: torch.device | str) -> ModeSupport:
    """The modes `device` runs, read from torch (see DeviceFacts.of about the CUDA context)."""
    return mode_support(DeviceFacts.of(device))
