"""What this device can do at best, measured: matrix-multiply rate per dtype, memory-copy bandwidth and the time of
one tiny operation launched back to back. The step budget (lessons/step_budget.py) sets a run's step against them:
how long its arithmetic and its bytes would take at these rates, and how much of the step is neither.

Each figure is the best of several timed repeats, each repeat long enough to swamp the clock's resolution; on CUDA
the device is synchronised before every clock read. A matrix multiply is timed at a size that is arithmetic-bound
on the device and then at twice that, until doubling gains less than PLATEAU: a rate measured below the plateau
(a 512 matmul on a 2-core EPYC ran 7x below a 2048 one) would make a step's lower bound exceed the step. Measured
once per device and torch build into a cache file, with the machine's load while it ran (the class server does it
before a worker's first job: `python -m trainer.peaks`); measured again when a run beats it (too_low).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from trainer.capabilities import resolve_device
from trainer.config import from_known_fields
from trainer.environment import cpu_model
from trainer.precision import tf32_switched
from trainer.timing_quality import cpu_sample, cpu_shares

# Square matrices, the first size timed: arithmetic-bound on each device (a CPU reaches its plateau near 2048).
MATMUL_SIZES = {"cpu": 2048, "cuda": 8192}
# fp16 matmuls on a CPU without fp16 units run tens of times slower than fp32: started at a quarter of the size.
CPU_FP16_SHRINK = 4
PLATEAU = 0.1  # a size is on the plateau when doubling it gains less than this share of its rate
MAX_CALL_S = 2.0  # no size is tried whose one multiply would take longer than this at the best rate so far
COPY_BYTES = {"cpu": 64 * 2**20, "cuda": 1 * 2**30}  # larger than the caches, so a copy measures memory
REPEAT_S = 0.1  # each timed repeat lasts at least this long (thousands of clock ticks)
REPEATS = 3


@dataclass
class DevicePeaks:
    """This device's measured best rates: TFLOP/s of a matrix multiply per dtype ("fp32", "tf32" on CUDA, "bf16",
    "fp16") at the side it reached its plateau (`matmul_sides`), memory-copy GB/s (bytes read plus bytes written,
    per second) and the time of one tiny op among many launched back to back (µs: launches overlap on a GPU, so
    this is the launch rate, not one launch's latency); when, and how loaded the machine was meanwhile."""

    device_name: str
    torch_version: str
    matmul_tflops: dict[str, float] = field(default_factory=dict)
    copy_gb_per_s: float | None = None
    launch_us: float | None = None
    measured_at: float = 0.0  # epoch seconds
    seconds: float = 0.0  # what measuring took
    matmul_sides: dict[str, int] = field(default_factory=dict)
    load: dict | None = None  # trainer.timing_quality.cpu_shares over the measurement: other processes' CPU, load

    @property
    def key(self) -> str:
        """The device as the cache knows it: its name and the torch build, since both change the rates."""
        return f"{self.device_name} | torch {self.torch_version}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "DevicePeaks":
        return from_known_fields(cls, data)


def device_key(device: torch.device) -> str:
    return DevicePeaks(_device_name(device), torch.__version__).key


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


def forget(peaks: DevicePeaks, cache: str | Path | None) -> None:
    """Drop these peaks' device from the cache, so that it is measured again."""
    stored = _read(cache)
    if cache is not None and stored.pop(peaks.key, None) is not None:
        _write(Path(cache), stored)


def too_low(peaks: DevicePeaks, flops: Mapping[str, int], dtypes: Mapping[str, str], step_s: float) -> bool:
    """Whether a run beat these peaks: its arithmetic (`flops` by kind of layer, each kind run in `dtypes`' rate)
    would take longer at them than its measured step did, so they are below what the device really does."""
    rates = [peaks.matmul_tflops.get(dtypes[kind]) for kind in flops]
    if not all(rates) or step_s <= 0:
        return False
    return sum(count / (rate * 1e12) for count, rate in zip(flops.values(), rates)) > step_s


def measure_peaks(device: torch.device) -> DevicePeaks:
    started, load_before = time.perf_counter(), cpu_sample()
    kind = device.type
    peaks = DevicePeaks(_device_name(device), torch.__version__, measured_at=time.time())
    size = MATMUL_SIZES.get(kind, MATMUL_SIZES["cpu"])
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for name, dtype in dtypes.items():
        side = size // CPU_FP16_SHRINK if kind == "cpu" and dtype == torch.float16 else size
        peaks.matmul_tflops[name], peaks.matmul_sides[name] = _plateau_tflops(device, dtype, side)
    if kind == "cuda":
        with tf32_switched(True):
            peaks.matmul_tflops["tf32"], peaks.matmul_sides["tf32"] = _plateau_tflops(device, torch.float32, size)
    peaks.copy_gb_per_s = _copy_gb_per_s(device)
    peaks.launch_us = _launch_us(device)
    peaks.seconds = time.perf_counter() - started
    load_after = cpu_sample()
    peaks.load = cpu_shares(load_before, load_after) if load_before and load_after else None
    return peaks


def _plateau_tflops(device: torch.device, dtype: torch.dtype, side: int) -> tuple[float, int]:
    """The matmul rate at `side`, then at twice the side while doubling still gains PLATEAU or more; the best rate
    and the side that gave it."""
    best, best_side = _matmul_tflops(device, dtype, side), side
    while 2 * (2 * side) ** 3 / (best * 1e12) <= MAX_CALL_S:
        side *= 2
        rate = _matmul_tflops(device, dtype, side)
        gained = rate / best - 1
        if rate > best:
            best, best_side = rate, side
        if gained < PLATEAU:
            break
    return best, best_side


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
    """The best per-call time of `work` over REPEATS repeats, each of as many calls as fill REPEAT_S (a try too
    short for that only sets the count)."""
    work()  # warm-up: the first call pays for kernel selection and lazy loading
    _sync(device)
    calls, best, kept = 1, float("inf"), 0
    while kept < REPEATS:
        start = time.perf_counter()
        for _ in range(calls):
            work()
        _sync(device)
        elapsed = time.perf_counter() - start
        if elapsed < REPEAT_S:
            calls = max(calls * 2, int(calls * REPEAT_S / max(elapsed, 1e-9)) + 1)
            continue
        best, kept = min(best, elapsed / calls), kept + 1
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


def main(argv: list[str] | None = None) -> int:
    """`python -m trainer.peaks --cache PATH [--device auto|cpu|cuda]`: this device's peaks from the cache, measured
    into it first when missing; printed as JSON. The class server runs it once per worker, in a fresh process."""
    parser = argparse.ArgumentParser(prog="python -m trainer.peaks", description=main.__doc__)
    parser.add_argument("--cache", required=True, help="the JSON file of measured peaks per device")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args(argv)
    print(json.dumps(cached_peaks(resolve_device(args.device), args.cache).to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
