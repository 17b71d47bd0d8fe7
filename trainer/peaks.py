"""What this device can do at best, measured: matrix-multiply rate per dtype, memory-copy bandwidth and the time one
tiny operation takes to launch. The step budget (lessons/step_budget.py) sets a run's step against them: how long
its arithmetic and its bytes would take at these rates, and how much of the step is neither.

Each figure is the best of a few timed repeats, each repeat long enough to swamp the clock's resolution; on CUDA the
device is synchronised before every clock read. Measured once per device and torch build, then read from a cache
file (a run on the same machine reuses it): about 5 s on a 2-core CPU, under a second on a GPU.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from trainer.config import from_known_fields
from trainer.environment import cpu_model
from trainer.precision import tf32_switched

MATMUL_SIZES = {"cpu": 512, "cuda": 8192}  # square matrices: large enough to be arithmetic-bound on each device
COPY_BYTES = {"cpu": 64 * 2**20, "cuda": 1 * 2**30}  # larger than the caches, so a copy measures memory
REPEAT_S = 0.1  # each timed repeat lasts at least this long (thousands of clock ticks)
REPEATS = 3
# fp16 matmuls on a CPU run tens of times slower than fp32 (no fp16 units): measured at a quarter of the size there.
CPU_FP16_SHRINK = 4


@dataclass
class DevicePeaks:
    """This device's measured best rates: TFLOP/s of a matrix multiply per dtype ("fp32", "tf32" on CUDA, "bf16",
    "fp16"), memory-copy GB/s (bytes read plus bytes written, per second) and the time of one tiny op, launched
    and finished (µs)."""

    device_name: str
    torch_version: str
    matmul_tflops: dict[str, float] = field(default_factory=dict)
    copy_gb_per_s: float | None = None
    launch_us: float | None = None
    measured_at: float = 0.0
    seconds: float = 0.0  # what measuring took

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "DevicePeaks":
        return from_known_fields(cls, data)


def device_key(device: torch.device) -> str:
    """The device as the cache knows it: its name and the torch build, since both change the rates."""
    return f"{_device_name(device)} | torch {torch.__version__}"


def cached_peaks(device: torch.device, cache: str | Path | None) -> DevicePeaks:
    """This device's peaks from `cache` (a JSON file of {device_key: peaks}); measured and added to it when missing.
    A cache that cannot be read or written is measured around, never an error: the figures are still right."""
    key = device_key(device)
    stored = _read(cache)
    if key in stored:
        return DevicePeaks.from_dict(stored[key])
    peaks = measure_peaks(device)
    if cache is not None:
        stored[key] = peaks.to_dict()
        _write(Path(cache), stored)
    return peaks


def stored_peaks(cache: str | Path | None) -> list[DevicePeaks]:
    """Every device's peaks the cache holds (none when it is missing or unreadable)."""
    return [DevicePeaks.from_dict(entry) for entry in _read(cache).values() if isinstance(entry, dict)]


def measure_peaks(device: torch.device) -> DevicePeaks:
    started = time.perf_counter()
    kind = device.type
    peaks = DevicePeaks(_device_name(device), torch.__version__, measured_at=time.time())
    size = MATMUL_SIZES.get(kind, MATMUL_SIZES["cpu"])
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for name, dtype in dtypes.items():
        side = size // CPU_FP16_SHRINK if kind == "cpu" and dtype == torch.float16 else size
        peaks.matmul_tflops[name] = _matmul_tflops(device, dtype, side)
    if kind == "cuda":
        with tf32_switched(True):
            peaks.matmul_tflops["tf32"] = _matmul_tflops(device, torch.float32, size)
    peaks.copy_gb_per_s = _copy_gb_per_s(device)
    peaks.launch_us = _launch_us(device)
    peaks.seconds = time.perf_counter() - started
    return peaks


def _matmul_tflops(device: torch.device, dtype: torch.dtype, side: int) -> float:
    a = torch.randn(side, side, device=device).to(dtype)
    b = torch.randn(side, side, device=device).to(dtype)
    seconds = _best_seconds(device, lambda: torch.mm(a, b))
    return 2 * side**3 / seconds / 1e12


def _copy_gb_per_s(device: torch.device) -> float:
    count = COPY_BYTES.get(device.type, COPY_BYTES["cpu"]) // 4
    source = torch.ones(count, device=device)
    target = torch.empty_like(source)
    seconds = _best_seconds(device, lambda: target.copy_(source))
    return 2 * source.numel() * source.element_size() / seconds / 1e9  # read once, written once


def _launch_us(device: torch.device) -> float:
    tiny = torch.zeros(1, device=device)
    return _best_seconds(device, lambda: tiny.add_(1)) * 1e6


def _best_seconds(device: torch.device, work: Callable[[], object]) -> float:
    """The best per-call time of `work` over REPEATS repeats, each of as many calls as fill REPEAT_S."""
    work()  # warm-up: the first call pays for kernel selection and lazy loading
    _sync(device)
    calls, best = 1, float("inf")
    for _ in range(REPEATS + 1):
        start = time.perf_counter()
        for _ in range(calls):
            work()
        _sync(device)
        elapsed = time.perf_counter() - start
        if elapsed < REPEAT_S:  # too short to time well: grow the count (this repeat is not kept)
            calls = max(calls * 2, int(calls * REPEAT_S / max(elapsed, 1e-9)) + 1)
            continue
        best = min(best, elapsed / calls)
    if best == float("inf"):  # never long enough (a very fast device): keep the last one
        best = elapsed / calls
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU: {cpu_model()} ({os.cpu_count()} logical cores, {torch.get_num_threads()} threads)"


def _read(cache: str | Path | None) -> dict:
    if cache is None:
        return {}
    try:
        data = json.loads(Path(cache).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(data, indent=2), encoding="utf-8")
        temporary.replace(path)
    except OSError:
        pass  # the peaks are in the result either way; the next run measures again
