"""What machine a result came from, and what mixed precision can be expected to gain on it."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import torch

from trainer import host_malloc
from trainer.capabilities import TF32_MIN_CAPABILITY, DeviceFacts, resolve_device
from trainer.config import from_known_fields
from trainer.precision import tf32_flags

# CPU features that decide how fast low-precision math runs on a CPU.
CPU_FLAGS_OF_INTEREST = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
NVML_UUID_PREFIXES = ("GPU-", "MIG-")  # a whole GPU, a MIG slice of one


def _cpu_fp16_note(amx_fp16: bool) -> str:
    """Whether fp16 autocast is fast on a CPU, said of that CPU: with AMX-FP16 units or without."""
    # fp16 was tens of times slower than fp32 on both CPUs measured (AVX2 only; AMX-BF16 with AVX512-FP16); only
    # AMX-FP16 units (Intel Xeon 6 on) give CPU fp16 matrix products hardware of their own.
    if amx_fp16:
        return ("This CPU has AMX-FP16 units, which recent PyTorch uses for fp16 matrix products: time amp-fp16 "
                "against amp-bf16 here rather than assume either is faster.")
    return ("This CPU has no fp16 matrix hardware (AMX-FP16, in Intel Xeon 6 and newer), so fp16 autocast here is "
            "tens of times slower than fp32: amp-fp16 is for GPUs.")


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    """CPU model name and feature flags from /proc/cpuinfo (empty where that file does not exist)."""
    model, flags = None, None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and flags is None:
                    flags = frozenset(value.split())
                if model is not None and flags is not None:
                    break
    except OSError:
        pass
    return model or platform.processor() or "unknown CPU", flags or frozenset()


def cpu_model() -> str:
    return _cpuinfo()[0]


def cpu_flags() -> list[str]:
    """The flags of interest that this CPU has, in a fixed order."""
    present = _cpuinfo()[1]
    return [flag for flag in CPU_FLAGS_OF_INTEREST if flag in present]


def cpu_has_amx() -> bool:
    """AMX tile units with bf16: matrix math in bf16 at full speed, where other CPUs emulate or half-use it."""
    return {"amx_tile", "amx_bf16"} <= set(cpu_flags())


def capture_environment(device: torch.device) -> dict:
    """A JSON-ready record of the hardware and software a run used."""
    device = torch.device(device)
    on_cuda = device.type == "cuda"
    env = {
        "device_type": device.type,
        "device_name": cpu_model(),
        "device_index": None,
        "compute_capability": None,
        "gpu_memory_total_bytes": None,
        "gpu_uuid": None,  # NVML's spelling, "GPU-..." or a MIG slice's "MIG-...": which of a server's GPUs ran it
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        **tf32_flags(),
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_flags": cpu_flags(),
        "host_malloc": host_malloc.state().detail,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
    }
    if on_cuda:
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        env.update(
            device_name=props.name,
            device_index=index,
            compute_capability=f"{props.major}.{props.minor}",
            gpu_memory_total_bytes=int(props.total_memory),
            gpu_uuid=nvml_uuid(str(props.uuid), index),
        )
    env["tf32_in_effect"] = tf32_in_effect(env)
    env["tf32_capable"] = tf32_capable(env)
    return env


def nvml_uuid(cuda_uuid: str, index: int) -> str:
    """A CUDA device's UUID as NVML and nvidia-smi spell it: "MIG-..." for a MIG slice, else "GPU-...".

    torch gives the bare hexadecimal UUID for both. A MIG slice is known by the name CUDA_VISIBLE_DEVICES gives it
    (how a server pins a job to one) or, failing that, by NVML knowing a MIG device of that UUID."""
    if cuda_uuid.startswith(NVML_UUID_PREFIXES):  # already spelt as NVML spells it
        return cuda_uuid
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    named_mig = index < len(visible) and visible[index].strip().startswith("MIG-")
    if named_mig or _nvml_knows(f"MIG-{cuda_uuid}"):
        return f"MIG-{cuda_uuid}"
    return f"GPU-{cuda_uuid}"


def _nvml_knows(uuid: str) -> bool:
    """Whether NVML has a device of this UUID (False without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no pynvml, or no driver library: nothing to ask
        return False
    try:
        pynvml.nvmlDeviceGetHandleByUUID(uuid)
        return True
    except Exception:  # NVMLError_NotFound, or a driver that cannot look MIG devices up by UUID
        return False
    finally:
        pynvml.nvmlShutdown()


def tf32_capable(env: dict) -> bool:
    """Whether the run's device has TF32 at all (a GPU of compute capability 8.0 or newer), its switch on or off."""
    capability = env.get("compute_capability")
    return env.get("device_type") == "cuda" and bool(capability) and (
        DeviceFacts("cuda", capability).capability >= TF32_MIN_CAPABILITY)


def tf32_in_effect(env: dict) -> bool:
    """Whether this run's fp32 convolutions could use TF32: its switch on, on a GPU that has TF32.

    The switches are CUDA's and are recorded on every device, so a CPU run of fp32-default records cuDNN's
    switch as "tf32" (PyTorch's default) although no TF32 arithmetic exists there; this says what happened.
    """
    return bool(env.get("cudnn_allow_tf32")) and tf32_capable(env)


@dataclass
class HardwareReport:
    """What this machine offers for mixed precision, in words a learner can act on."""

    device_name: str
    device_type: str  # cpu | cuda
    tensor_cores: bool  # GPU compute capability 7.0 or newer
    native_bf16: bool  # GPU with bfloat16 arithmetic (compute capability 8.0 or newer)
    cpu_bf16: bool  # avx512_bf16 or amx_bf16
    cpu_amx: bool  # AMX tile units (matrix math in bf16 on the CPU)
    cpu_fp16: bool  # avx512_fp16 present (PyTorch's CPU autocast still gains little from it)
    recommended_amp: str  # a precision name; "fp32" where no AMP mode is expected to help
    expected_gain: str  # one plain sentence
    notes: list[str] = field(default_factory=list)
    compute_capability: str | None = None
    cpu_amx_fp16: bool = False  # AMX-FP16 units: fp16 matrix products in hardware on the CPU (Intel Xeon 6)

    @property
    def cpu_fp16_note(self) -> str:
        """Whether fp16 autocast is fast on this machine's CPU, in one sentence about this CPU."""
        return _cpu_fp16_note(self.cpu_amx_fp16)

    @property
    def facts(self) -> DeviceFacts:
        """What trainer.capabilities needs to say which modes this device runs."""
        return DeviceFacts(self.device_type, self.compute_capability, self.native_bf16)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "HardwareReport":
        return from_known_fields(cls, data)


def hardware_report(device: torch.device | str | None = None) -> HardwareReport:
    """Describe `device` (default: the GPU if there is one, else the CPU) for mixed-precision training."""
    device = resolve_device("auto") if device is None else torch.device(device)
    flags = set(cpu_flags())
    cpu_amx = cpu_has_amx()
    cpu_bf16 = bool(flags & {"avx512_bf16", "amx_bf16"})
    cpu_fp16 = "avx512_fp16" in flags
    common = dict(cpu_bf16=cpu_bf16, cpu_amx=cpu_amx, cpu_fp16=cpu_fp16, cpu_amx_fp16="amx_fp16" in flags)
    if device.type == "cuda":
        return _gpu_report(device, common)
    return _cpu_report(common)


def _gpu_report(device: torch.device, common: dict) -> HardwareReport:
    index = device.index if device.index is not None else torch.cuda.current_device()
    facts = DeviceFacts.of(torch.device("cuda", index))
    major, minor = facts.capability
    name = torch.cuda.get_device_name(index)
    tensor_cores = major >= 7
    native_bf16 = facts.native_bf16
    notes = []
    if native_bf16:
        recommended = "amp-bf16"
        gain = (
            "Tensor Cores already run this GPU's fp32 convolutions in TF32, as PyTorch defaults them; amp-bf16 or "
            "amp-fp16 doubles that rate, puts the linear layers on them too and halves the activations. A step gains "
            "only as much as it waits for that arithmetic: the lab's model at batch 256 barely does (When AMP pays "
            "off counts it), wider models and larger batches more."
        )
        notes.append("amp-bf16 needs no loss scaling; amp-fp16 is about as fast but needs the GradScaler.")
        notes.append("tf32 speeds up fp32 math on this GPU without changing the model code.")
    elif tensor_cores:
        recommended = "amp-fp16"
        gain = (
            "Tensor Cores run fp16 matrix math several times faster than fp32 here (no TF32 before Ampere, and no "
            "native bf16), and amp-fp16 halves the activations. A step gains only as much as it waits for that "
            "arithmetic: the lab's model at batch 256 barely does (When AMP pays off counts it)."
        )
    else:
        recommended = "amp-fp16"
        gain = (
            "This GPU has no Tensor Cores, so amp-fp16 mainly saves activation memory and bandwidth; expect a "
            "small speedup at best."
        )
    notes.append("A small model with small batches is often bound by the data loader, not by arithmetic.")
    return HardwareReport(
        device_name=name,
        device_type="cuda",
        tensor_cores=tensor_cores,
        native_bf16=native_bf16,
        recommended_amp=recommended,
        expected_gain=gain,
        notes=notes,
        compute_capability=f"{major}.{minor}",
        **common,
    )


def _cpu_report(common: dict) -> HardwareReport:
    slow_fp16 = "" if common["cpu_amx_fp16"] else "; fp16 autocast here is tens of times slower"
    if common["cpu_amx"]:
        recommended = "amp-bf16"
        gain = (
            "On this CPU bf16 autocast runs convolutions and matrix products on the AMX tile units: expect about "
            "1.3x over fp32 behind the lab's DataLoader and over 2x with the data resident in memory and "
            f"channels_last (2.4x measured on a 2-core AMX CPU){slow_fp16}."
        )
    elif common["cpu_bf16"]:
        recommended = "amp-bf16"
        gain = (
            "This CPU has AVX-512 bf16 instructions but no AMX, so amp-bf16 may be modestly faster than fp32"
            f"{slow_fp16}."
        )
    else:
        recommended = "fp32"
        gain = (
            "This CPU has no bf16 hardware, so mixed precision is emulated and usually slower than fp32; "
            "AMP pays off on a GPU."
        )
    return HardwareReport(
        device_name=cpu_model(),
        device_type="cpu",
        tensor_cores=False,
        native_bf16=False,
        recommended_amp=recommended,
        expected_gain=gain,
        notes=[_cpu_fp16_note(common["cpu_amx_fp16"]),
               "tf32 exists only on NVIDIA GPUs (compute capability 8.0 or newer)."],
        **common,
    )
