"""Honest measurement: synchronised clocks, on-device loss sums, and peak-memory monitors.

CUDA runs asynchronously, so a host clock read without a synchronize measures how fast work was *queued*,
not how fast it ran. Every clock read here synchronises first; the loop reads the clock only at a few points.
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import torch

from trainer import host_malloc

NVML_INTERVAL_S = 0.02
RSS_INTERVAL_S = 0.01


def synchronize(device: torch.device) -> None:
    """Wait for all queued device work; a no-op on the CPU, where every op already finished."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device) -> float:
    """A host time stamp (seconds) taken after the device has finished everything queued so far."""
    synchronize(device)
    return time.perf_counter()


class LossMeter:
    """Sums losses on the device so that the loop does not force a sync on every step."""

    def __init__(self, device: torch.device):
        self._sum = torch.zeros((), dtype=torch.float32, device=device)
        self.count = 0

    def add(self, loss: torch.Tensor) -> None:
        self._sum += loss.float()
        self.count += 1

    def reset(self) -> None:
        self._sum.zero_()
        self.count = 0

    def mean_and_reset(self) -> float:
        """The mean since the last reset; `.item()` synchronises, so call it only at log points."""
        mean = self._sum.item() / self.count if self.count else float("nan")
        self.reset()
        return mean


class ScaleTracker:
    """The GradScaler's loss scale after every update. Dynamic scaling lowers the scale only when a step's
    gradients overflowed, and then the optimizer step was skipped, so a drop marks a skipped step.

    The scales stay on the device until `flush()`, which the loop calls at log points where it syncs anyway:
    a `get_scale()` per step would add a host-device sync to every fp16 step.
    """

    def __init__(self, scaler: torch.amp.GradScaler):
        self._scaler = scaler
        self.enabled = scaler.is_enabled()
        self._scale = scaler.get_scale() if self.enabled else None  # no sync: nothing is scaled yet
        self._pending: list[tuple[int, torch.Tensor]] = []
        self.history: list[dict] = []  # {"step", "scale"}
        self.skipped: list[int] = []

    def after_update(self, step: int) -> None:
        if not self.enabled:
            return
        # A copy, because update() changes the scale tensor in place.
        self._pending.append((step, self._scaler._get_scale_async().clone()))

    def flush(self) -> None:
        """Read the scales recorded since the last flush into `history` and `skipped` (one sync)."""
        if not self._pending:
            return
        scales = torch.cat([scale.reshape(1) for _, scale in self._pending]).tolist()
        for (step, _), scale in zip(self._pending, scales):
            self.history.append({"step": step, "scale": scale})
            if scale < self._scale:
                self.skipped.append(step)
            self._scale = scale
        self._pending.clear()


def steady_throughput(images_after_warmup: int, seconds_after_warmup: float) -> float | None:
    """Images per second after the warm-up steps, or None when nothing was left to measure."""
    if images_after_warmup <= 0 or seconds_after_warmup <= 0:
        return None
    return images_after_warmup / seconds_after_warmup


class _PeakSampler(threading.Thread):
    """Polls `read()` every `interval` seconds in the background and keeps the largest value."""

    def __init__(self, read, interval: float):
        super().__init__(daemon=True, name="amp-lab-memory-sampler")
        self._read = read
        self._interval = interval
        self._stop_event = threading.Event()
        self.peak = read()

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            self.peak = max(self.peak, self._read())

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        self.peak = max(self.peak, self._read())
        return self.peak


class MemoryMonitor:
    """Peak memory of one run, labelled as in results.MEMORY_LABELS.

    CUDA: PyTorch's allocator peaks (reset at start) and the device's used memory as nvidia-smi sees it,
    sampled through pynvml. CPU: the peak growth of this process's resident memory over its value at start,
    from the kernel's own high-water mark (reset at start) where Linux allows it, else sampled.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.warnings: list[str] = []
        self._nvml: _PeakSampler | None = None
        self._rss: _PeakSampler | None = None
        self._rss_start = 0

    def start(self) -> "MemoryMonitor":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self._nvml = self._start_nvml()
        else:
            host_malloc.release_free_memory()  # count this run's memory, not free heap left by earlier work
            process = psutil.Process(os.getpid())
            self._rss_start = process.memory_info().rss
            if not _reset_kernel_rss_peak():
                self._rss = _PeakSampler(lambda: process.memory_info().rss, RSS_INTERVAL_S)
                self._rss.start()
        return self

    def stop(self) -> dict[str, int]:
        """Stop sampling and return the peaks in bytes."""
        if self.device.type != "cuda":
            peak = self._rss.stop() if self._rss is not None else _kernel_rss_peak()
            return {"process_rss_growth": max(0, peak - self._rss_start)}
        torch.cuda.synchronize(self.device)
        peaks = {
            "torch_max_allocated": int(torch.cuda.max_memory_allocated(self.device)),
            "torch_max_reserved": int(torch.cuda.max_memory_reserved(self.device)),
        }
        if self._nvml is not None:
            peaks["nvml_device_used"] = int(self._nvml.stop())
            self._nvml = None
        return peaks

    def _start_nvml(self) -> _PeakSampler | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = _nvml_handle(pynvml, self.device)
            sampler = _PeakSampler(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used, NVML_INTERVAL_S)
        except Exception as exc:  # pynvml raises its own error types, and a missing driver library is an OSError
            self.warnings.append(f"device memory as nvidia-smi sees it is not reported: pynvml failed ({exc})")
            return None
        sampler.start()
        return sampler


def _reset_kernel_rss_peak() -> bool:
    """Reset Linux's peak-RSS counter (VmHWM) to the current RSS; False where that is not possible.

    The kernel then tracks the exact peak for free, where a sampling thread would both miss short peaks and,
    on a 2-core machine, steal time from the training threads it measures.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _kernel_rss_peak() > 0
    except OSError:
        return False


def _kernel_rss_peak() -> int:
    """VmHWM from /proc/self/status in bytes (0 if absent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _nvml_handle(pynvml, device: torch.device):
    """The NVML handle of the GPU this run uses. CUDA and NVML may number GPUs differently, so match by UUID,
    falling back to the index as CUDA_VISIBLE_DEVICES maps it."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    except Exception:  # older drivers or MIG slices: NVML's own error types
        return pynvml.nvmlDeviceGetHandleByIndex(_physical_index(index))


def _physical_index(index: int) -> int:
    """NVML numbers GPUs physically; map through CUDA_VISIBLE_DEVICES when it lists plain indices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if visible != [""] and index < len(visible) and visible[index].strip().isdigit():
        return int(visible[index])
    return index


def device_memory_summary(device: torch.device) -> str:
    """One phrase about the device's memory now, for an out-of-memory message."""
    if device.type != "cuda":
        total = psutil.virtual_memory().total
        return f"{gib(total)} host memory in total, {gib(psutil.Process().memory_info().rss)} used by this run"
    free, total = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    return f"{gib(total)} on the GPU, {gib(total - free)} in use ({gib(reserved)} held by this run)"


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.2f} GiB"
