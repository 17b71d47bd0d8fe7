"""Precision policy: one object per run that owns autocast, the GradScaler and the TF32 switches.

The training step asks the policy for an autocast context and a scaler; both are no-ops when the mode
does not need them, so the loop has no per-mode branches. Three modes compute in fp32: strict `fp32` (TF32 off),
`tf32` (on), and `fp32-default`, which keeps the switches as PyTorch sets them, as the lab's script does (on an
Ampere-or-newer GPU, convolutions in TF32 and matmuls in full fp32). Every run records the switches it ran with.
The two deliberate failures are the same policy with one safeguard taken away: `amp-fp16-unscaled` is amp-fp16 with
its scaler disabled, and `fp16-true` casts the model itself to fp16 (`prepare_model`) and autocasts nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from trainer.capabilities import support_on
from trainer.config import DEFAULT_GROWTH_INTERVAL, DEFAULT_LOSS_SCALE, FAILURE_NOTES, check_precision

AUTOCAST_DTYPES = {"amp-fp16": torch.float16, "amp-fp16-unscaled": torch.float16, "amp-bf16": torch.bfloat16}
MODEL_DTYPES = {"fp16-true": torch.float16}  # the modes that train the model itself in 16 bits


@dataclass(frozen=True)
class PrecisionPolicy:
    """How a run uses number formats on one device."""

    precision: str  # fp32 | fp32-default | tf32 | amp-fp16 | amp-bf16 | amp-fp16-unscaled | fp16-true
    device_type: str  # cpu | cuda
    autocast_dtype: torch.dtype | None  # None: no autocast, everything in fp32
    use_scaler: bool  # loss scaling is needed only for fp16's narrow exponent range
    allow_tf32: bool | None  # TF32 for fp32 matmuls/convolutions (CUDA only); None: as PyTorch defaults them
    warnings: tuple[str, ...] = field(default=())
    loss_scale_init: float = DEFAULT_LOSS_SCALE  # the scaler's settings (used only when use_scaler)
    loss_scale_growth_interval: int = DEFAULT_GROWTH_INTERVAL
    model_dtype: torch.dtype | None = None  # fp16-true: the weights themselves in fp16; None: fp32 weights

    @classmethod
    def resolve(cls, precision: str, device: torch.device | str, loss_scale_init: float = DEFAULT_LOSS_SCALE,
                loss_scale_growth_interval: int = DEFAULT_GROWTH_INTERVAL) -> "PrecisionPolicy":
        """Check `precision` for `device` and build the policy; raise a one-line error if unsupported."""
        device = torch.device(device)
        support = support_on(device)
        check_precision(precision, support.refused)
        warnings = tuple(notes[precision] for notes in (FAILURE_NOTES, support.warnings) if precision in notes)
        allow_tf32 = None if precision == "fp32-default" else precision == "tf32"
        return cls(precision, device.type, AUTOCAST_DTYPES.get(precision), precision == "amp-fp16", allow_tf32,
                   warnings, float(loss_scale_init), int(loss_scale_growth_interval), MODEL_DTYPES.get(precision))

    @property
    def uses_autocast(self) -> bool:
        return self.autocast_dtype is not None

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward-pass context: autocast to the low dtype, or a disabled autocast for the fp32 modes."""
        return torch.autocast(
            device_type=self.device_type,
            dtype=self.autocast_dtype or torch.float32,
            enabled=self.uses_autocast,
        )

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model as this mode trains it: unchanged, or (fp16-true) cast to fp16, weights and all, with its inputs
        cast on the way in, so that the step and the evaluation call it as they call any other."""
        if self.model_dtype is None:
            return model
        dtype = self.model_dtype
        model.to(dtype)
        model.register_forward_pre_hook(lambda _module, args: tuple(
            arg.to(dtype) if torch.is_tensor(arg) and arg.is_floating_point() else arg for arg in args))
        return model

    def make_scaler(self) -> torch.amp.GradScaler:
        """A fresh scaler for one run; disabled (a pass-through) unless the mode is amp-fp16 (amp-fp16-unscaled is
        amp-fp16 with it disabled)."""
        return torch.amp.GradScaler(self.device_type, init_scale=self.loss_scale_init,
                                    growth_interval=self.loss_scale_growth_interval, enabled=self.use_scaler)

    def apply_backend_flags(self, cudnn_benchmark: bool = False) -> dict:
        """Set the TF32 switches for this mode (fp32-default: PyTorch's own) and cuDNN's benchmark, process-wide,
        and return them as recorded.

        The TF32 switches are CUDA's, so setting them on a CPU changes no arithmetic there; they are set on every
        device so that a result's record says which fp32 its mode asked for.
        """
        if self.allow_tf32 is None:
            restore_tf32_defaults()
        else:
            set_tf32(self.allow_tf32)
        if self.device_type == "cuda":
            torch.backends.cudnn.benchmark = cudnn_benchmark
        return tf32_flags()


def matmul_dtype(precision: str, convolution: bool, tf32_convs: bool) -> str:
    """The arithmetic a precision mode's convolutions or linear layers run in: 16-bit under AMP; TF32 for tf32, and
    for fp32-default's convolutions where the run had cuDNN's TF32 on; else fp32."""
    if precision in ("amp-fp16", "amp-fp16-unscaled", "fp16-true"):
        return "fp16"
    if precision == "amp-bf16":
        return "bf16"
    if precision == "tf32" or (precision == "fp32-default" and convolution and tf32_convs):
        return "tf32"
    return "fp32"


def set_tf32(enabled: bool) -> None:
    """Switch TF32 for fp32 matmuls and convolutions on or off, so that fp32 means true fp32."""
    if _has_fp32_precision():
        value = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = value
        torch.backends.cudnn.conv.fp32_precision = value
        torch.backends.cudnn.rnn.fp32_precision = value
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


@contextlib.contextmanager
def tf32_switched(enabled: bool):
    """TF32 on or off for the block, then every switch back as it stood, all through set_tf32's API: reading torch's
    legacy allow_tf32 flags in a process that set the new fp32_precision ones raises."""
    before = tuple(getattr(owner, name) for owner, name in _tf32_switches())
    set_tf32(enabled)
    try:
        yield
    finally:
        _write_switches(before)


def default_tf32() -> dict[str, bool]:
    """Whether PyTorch's own defaults (as this process started with them) let fp32 convolutions ("conv") and matmuls
    ("matmul") run in TF32 on an Ampere-or-newer GPU: the fp32 a script that sets no switch runs, as the lab's."""
    before = tuple(getattr(owner, name) for owner, name in _tf32_switches())
    restore_tf32_defaults()
    try:
        flags = tf32_flags()
    finally:
        _write_switches(before)
    return {"conv": flags["cudnn_allow_tf32"], "matmul": flags["cuda_matmul_allow_tf32"]}


def _tf32_switches() -> tuple[tuple[object, str], ...]:
    """The switches set_tf32 writes, with their parents, parents first (setting a parent rewrites its children)."""
    b = torch.backends
    if _has_fp32_precision():
        return ((b, "fp32_precision"), (b.cudnn, "fp32_precision"), (b.cuda.matmul, "fp32_precision"),
                (b.cudnn.conv, "fp32_precision"), (b.cudnn.rnn, "fp32_precision"))
    return ((b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32"))


def restore_tf32_defaults() -> None:
    """Put the TF32 switches back to PyTorch's defaults; in a process that changed none, nothing is written."""
    _write_switches(_TF32_DEFAULTS)


def _write_switches(values: tuple) -> None:
    # Only a switch that differs is written, and each is read after its parents were written.
    for (owner, name), value in zip(_tf32_switches(), values):
        if getattr(owner, name) != value:
            setattr(owner, name, value)


def tf32_flags() -> dict:
    """The TF32 and cuDNN switches as they stand now, for the environment record."""
    flags = {"cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}
    if not _has_fp32_precision():
        return {
            "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            **flags,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        }
    matmul = _effective_fp32_precision(torch.backends.cuda.matmul.fp32_precision)
    conv = _effective_fp32_precision(torch.backends.cudnn.conv.fp32_precision)
    return {
        "cuda_matmul_allow_tf32": matmul == "tf32",
        "cudnn_allow_tf32": conv == "tf32",
        **flags,
        "cuda_matmul_fp32_precision": matmul,
        "cudnn_conv_fp32_precision": conv,
    }


def _has_fp32_precision() -> bool:
    # torch 2.9+: reading the old allow_tf32 flags there warns (2.9-2.10) or raises once the new API was used.
    return hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _effective_fp32_precision(op_value: str) -> str:
    """An operator's fp32_precision with "none" resolved as torch does: the CUDA backend's, then the generic one."""
    for value in (op_value, torch.backends.cudnn.fp32_precision, torch.backends.fp32_precision):
        if value != "none":
            return value
    return "ieee"


# PyTorch's defaults, read when the trainer is first imported, before it sets anything. A run process trains once
# and a pre-started one (trainer/isolated.py) has set nothing before its config arrives, so there these are the
# switches torch started with; a process that trains several times (tests, lessons, scripts) may have changed them
# since, and fp32-default puts them back.
_TF32_DEFAULTS = tuple(getattr(owner, name) for owner, name in _tf32_switches())
