"""Precision policy: one object per run that owns autocast, the GradScaler and the TF32 switches.

The training step asks the policy for an autocast context and a scaler; both are no-ops when the mode
does not need them, so the loop has no per-mode branches.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from trainer.config import PRECISIONS
from trainer.errors import ConfigError, UnsupportedModeError

CPU_FP16_WARNING = (
    "amp-fp16 on a CPU runs fp16 kernels without hardware support: expect it to be tens of times "
    "slower than fp32 here. Use amp-bf16 on a CPU."
)


@dataclass(frozen=True)
class PrecisionPolicy:
    """How a run uses number formats on one device."""

    name: str  # fp32 | tf32 | amp-fp16 | amp-bf16
    device_type: str  # cpu | cuda
    autocast_dtype: torch.dtype | None  # None: no autocast, everything in fp32
    use_scaler: bool  # loss scaling is needed only for fp16's narrow exponent range
    allow_tf32: bool  # TF32 tensor-core math for fp32 matmuls/convolutions (CUDA only)
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def resolve(cls, name: str, device: torch.device | str) -> "PrecisionPolicy":
        """Validate `name` for `device` and build the policy; raise a one-line error if unsupported."""
        device = torch.device(device)
        if name not in PRECISIONS:
            raise ConfigError(f"unknown precision {name!r}: choose one of {', '.join(PRECISIONS)}")
        on_cuda = device.type == "cuda"
        if device.type not in ("cpu", "cuda"):
            raise UnsupportedModeError(f"device {device.type!r} is not supported: use cpu or cuda")
        if name == "tf32":
            if not on_cuda:
                raise UnsupportedModeError("tf32 needs an NVIDIA GPU (compute capability 8.0 or newer); this run is on the CPU")
            major, minor = torch.cuda.get_device_capability(device)
            if major < 8:
                raise UnsupportedModeError(
                    f"tf32 needs compute capability 8.0 or newer; this GPU has {major}.{minor}"
                )
            return cls(name, "cuda", None, False, True)
        if name == "fp32":
            return cls(name, device.type, None, False, False)
        if name == "amp-bf16":
            if on_cuda and not torch.cuda.is_bf16_supported(including_emulation=False):
                raise UnsupportedModeError("amp-bf16 needs a GPU with native bfloat16 (Ampere or newer): use amp-fp16")
            return cls(name, device.type, torch.bfloat16, False, False)
        warnings = () if on_cuda else (CPU_FP16_WARNING,)
        return cls(name, device.type, torch.float16, True, False, warnings)

    @property
    def uses_autocast(self) -> bool:
        return self.autocast_dtype is not None

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward-pass context: autocast to the low dtype, or a disabled autocast for fp32/tf32."""
        return torch.autocast(
            device_type=self.device_type,
            dtype=self.autocast_dtype or torch.float32,
            enabled=self.uses_autocast,
        )

    def make_scaler(self) -> torch.amp.GradScaler:
        """A fresh scaler for one run; disabled (a pass-through) unless the mode is amp-fp16."""
        return torch.amp.GradScaler(self.device_type, enabled=self.use_scaler)

    def apply_backend_flags(self, cudnn_benchmark: bool = False) -> dict:
        """Set TF32 and cuDNN switches for this run (process-wide) and return them as recorded."""
        if self.device_type == "cuda":
            set_tf32(self.allow_tf32)
            torch.backends.cudnn.benchmark = cudnn_benchmark
        return tf32_flags()


def set_tf32(enabled: bool) -> None:
    """Switch TF32 for fp32 matmuls and convolutions on or off, so that fp32 means true fp32."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def tf32_flags() -> dict:
    """The TF32 and cuDNN switches as they stand now, for the environment record."""
    return {
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
