"""The memory a run uses at its peak, watched from beside it: PyTorch's allocator and NVML on a GPU, the process's
resident memory on a CPU; and, from the same NVML samples, what else the GPU did while the run was timed.

The monitor watches the run; it is not part of a step: started before training, stopped after the accuracy check.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

import psutil
import torch

from trainer import host_malloc

NVML_INTERVAL_S = 0.02
RSS_INTERVAL_S = 0.01


class _PeakSampler:
    """Polls `read()` every `interval` seconds in a background thread and keeps the largest value.

    The thread is stopped before every fork of this process and started again after it (a run starts sampling
    before its DataLoader forks its workers): a worker never inherits a sampler caught in the middle of a reading,
    holding a lock of NVML's or of the allocator's that nothing in the worker would ever release."""

    def __init__(self, read, interval: float):
        self._read = read
        self._interval = interval
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self.failed: str | None = None  # the last failed reading, if any
        self.peak = read()

    def start(self) -> None:
        _SAMPLING.add(self)
        self._launch()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> int:
        _SAMPLING.discard(self)  # before the thread stops, so that a fork cannot start it again
        self._halt()
        self._sample()
        return self.peak

    def _launch(self) -> None:
        self._stop_event = threading.Event()  # a fresh one per thread: an old thread's stop stays its own
        self._thread = threading.Thread(target=self._run, args=(self._stop_event,), daemon=True,
                                        name="amp-lab-memory-sampler")
        self._thread.start()

    def _halt(self) -> None:
        """Stop the thread and wait until it has left any reading it was in."""
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join()
            self._thread = None

    def _run(self, stop_event: threading.Event) -> None:
        while not stop_event.wait(self._interval):
            self._sample()

    def _sample(self) -> None:
        # A reading that fails (NVML can, now and then) keeps the peak so far: the run's result must not be lost.
        try:
            self.peak = max(self.peak, self._read())
        except Exception as error:  # noqa: BLE001 (any reader's error; it is recorded, not raised)
            self.failed = f"{type(error).__name__}: {error}"


# The samplers whose thread runs now: paused around each fork of the process (see _PeakSampler).
_SAMPLING: weakref.WeakSet[_PeakSampler] = weakref.WeakSet()


def _pause_samplers() -> None:
    for sampler in list(_SAMPLING):
        sampler._halt()


def _resume_samplers() -> None:
    for sampler in list(_SAMPLING):
        sampler._launch()


def _forget_samplers() -> None:
    _SAMPLING.clear()  # a forked child samples nothing: its copies of the samplers have no thread


os.register_at_fork(before=_pause_samplers, after_in_parent=_resume_samplers, after_in_child=_forget_samplers)


class MemoryMonitor:
    """Peak memory of one run, labelled as in results.MEMORY_LABELS.

    CUDA: PyTorch's allocator peaks (reset at start) less the resident loader's data (`resident_bytes`, the same
    in every mode), and this process's GPU memory as nvidia-smi lists it, sampled through pynvml. CPU: the peak
    growth of this process's resident memory over its value at start (after the data was loaded), from the
    kernel's own high-water mark (reset at start) where Linux allows it, else sampled.
    """

    def __init__(self, device: torch.device, resident_bytes: int = 0):
        self.device = device
        self.resident_bytes = resident_bytes
        self.warnings: list[str] = []
        self._nvml: _PeakSampler | None = None
        self._nvml_reader: _NvmlReader | None = None
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
            "torch_max_allocated": max(0, int(torch.cuda.max_memory_allocated(self.device)) - self.resident_bytes),
            "torch_max_reserved": max(0, int(torch.cuda.max_memory_reserved(self.device)) - self.resident_bytes),
        }
        if self._nvml is not None:
            peaks[self._nvml_reader.label] = int(self._nvml.stop())
            self.warnings.extend(self._nvml_reader.warnings())
            if self._nvml.failed:
                self.warnings.append(f"NVML failed to answer during the run ({self._nvml.failed}): the nvidia-smi "
                                     "figure is the peak of the readings before that")
            self._nvml = None
        return peaks

    def gpu_activity(self, window: tuple[float, float] | None) -> dict | None:
        """What the GPU did besides this run between two perf_counter() times (the timed window), from the NVML
        samples; None on a CPU, without pynvml, or with no sample in the window."""
        if self._nvml_reader is None or window is None:
            return None
        return self._nvml_reader.activity(*window)

    def _start_nvml(self) -> _PeakSampler | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            handle = _nvml_handle(pynvml, str(torch.cuda.get_device_properties(index).uuid), index)
            self._nvml_reader = _NvmlReader(pynvml, handle, os.getpid())
            sampler = _PeakSampler(self._nvml_reader.read, NVML_INTERVAL_S)
        except Exception as exc:  # pynvml raises its own error types, and a missing driver library is an OSError
            self.warnings.append(f"device memory as nvidia-smi sees it is not reported: pynvml failed ({exc})")
            return None
        sampler.start()
        return sampler


# NVML's clock event reasons that mean power or heat held the clocks down (nvml.h, nvmlClocksEventReason*): software
# power cap 0x4, hardware slowdown 0x8, software thermal 0x20, hardware thermal 0x40, power brake 0x80. Idle (0x1),
# application clock settings and sync boost are not a disturbance of the run.
NVML_SLOWDOWN_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
BUSY_UTILIZATION_PCT = 80  # a sample at or above this GPU utilisation counts as computing


class _NvmlReader:
    """GPU memory as nvidia-smi sees it: this process's own use where NVML lists the process (the CUDA context
    included), else the whole device's (v2: without the driver's reserve). Notes other compute processes."""

    def __init__(self, pynvml, handle, pid: int):
        self._pynvml, self._handle, self._pid = pynvml, handle, pid
        self._seen: set[int] = set()
        # time, SM MHz, utilisation %, power/heat slowdown (None: NVML cannot say), pids
        self._samples: list[tuple[float, int | None, int | None, bool | None, frozenset]] = []
        # NVML's clock reasons under their current name (driver 535+) or the older one; None on a fake or old one.
        self._clock_reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                               or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        self.per_process = self._own_use(self._processes()) is not None
        self.label = "nvml_process_used" if self.per_process else "nvml_device_used"

    def read(self) -> int:
        processes = self._processes()
        self._samples.append((time.perf_counter(), *self._clock_and_utilization(), self._slowed_down(),
                              frozenset(p.pid for p in processes)))
        if self.per_process:
            return self._own_use(processes) or 0
        version = getattr(self._pynvml, "nvmlMemory_v2", None)
        if version is None:
            return self._pynvml.nvmlDeviceGetMemoryInfo(self._handle).used
        return self._pynvml.nvmlDeviceGetMemoryInfo(self._handle, version=version).used

    def warnings(self) -> list[str]:
        # Without our own pid in the list (another pid namespace, e.g. a container) one of the pids is us.
        others = len(self._seen - {self._pid}) if self.per_process else max(0, len(self._seen) - 1)
        notes = []
        if not self.per_process:
            notes.append("NVML does not list this process, so the nvidia-smi figure is the whole GPU's")
        if others:
            notes.append(
                f"{others} other process(es) computed on this GPU during the run: its timings may be slower than "
                "alone, and device-wide memory figures include them"
            )
        return notes

    def activity(self, start: float, end: float) -> dict | None:
        """Over the samples taken in [start, end]: the SM clock range while the GPU was busy, mean utilisation, how
        many samples NVML said were slowed for power or heat, and other compute processes."""
        window = [sample for sample in self._samples if start <= sample[0] <= end]
        if not window:
            return None
        utils = [s[2] for s in window if s[2] is not None]
        # A GPU waiting for its next batch lowers its clock by itself (an idle H200 sits near 345 MHz against
        # 1980 under load): only busy samples say whether the clock held up while it computed.
        busy = [s for s in window if s[2] is None or s[2] >= BUSY_UTILIZATION_PCT]
        clocks = [s[1] for s in busy if s[1]]
        slowdowns = [s[3] for s in window if s[3] is not None]
        pids = frozenset().union(*(s[4] for s in window))
        others = len(pids - {self._pid}) if self.per_process else max(0, len(pids) - 1)
        return {
            "samples": len(window),
            "other_processes": others,
            "sm_clock_min_mhz": min(clocks) if clocks else None,
            "sm_clock_max_mhz": max(clocks) if clocks else None,
            "utilization_mean_pct": round(sum(utils) / len(utils), 1) if utils else None,
            "slowdown_samples": sum(slowdowns) if slowdowns else None,
        }

    def _slowed_down(self) -> bool | None:
        """Whether NVML gives power or heat as a reason the clocks are below their maximum now; None where it cannot
        say (an old driver, a fake). An idle GPU's lower clock is not among these reasons."""
        if self._clock_reasons is None:
            return None
        try:
            return bool(self._clock_reasons(self._handle) & NVML_SLOWDOWN_REASONS)
        except Exception:  # not supported on this GPU or driver
            return None

    def _clock_and_utilization(self) -> tuple[int | None, int | None]:
        try:
            clock = self._pynvml.nvmlDeviceGetClockInfo(self._handle, self._pynvml.NVML_CLOCK_SM)
        except Exception:  # a fake or an old driver without it
            clock = None
        try:
            util = self._pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        except Exception:  # MIG slices report no utilisation
            util = None
        return clock, util

    def _processes(self) -> list:
        try:
            processes = self._pynvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except self._pynvml.NVMLError:
            return []
        self._seen.update(process.pid for process in processes)
        return processes

    def _own_use(self, processes) -> int | None:
        used = [p.usedGpuMemory for p in processes if p.pid == self._pid and p.usedGpuMemory is not None]
        return sum(used) if used else None


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


def _nvml_handle(pynvml, cuda_uuid: str, cuda_index: int):
    """The NVML handle of CUDA device `cuda_index`. CUDA and NVML may number GPUs differently, so match by UUID
    (NVML spells a whole GPU's "GPU-..." and a MIG slice's "MIG-..."), falling back to the index only where the
    two numberings agree."""
    prefixed = cuda_uuid.startswith(("GPU-", "MIG-"))
    for name in [cuda_uuid] if prefixed else [f"GPU-{cuda_uuid}", f"MIG-{cuda_uuid}"]:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(name)
        except pynvml.NVMLError:
            pass
    # NVML numbers GPUs in PCI bus order; CUDA does so only when CUDA_DEVICE_ORDER says so (default: fastest first).
    physical = _physical_index(cuda_index)
    if physical is not None and (os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
                                 or pynvml.nvmlDeviceGetCount() == 1):
        return pynvml.nvmlDeviceGetHandleByIndex(physical)
    raise LookupError(f"NVML has no GPU with CUDA device {cuda_index}'s UUID, and the two number GPUs differently")


def _physical_index(index: int) -> int | None:
    """NVML numbers GPUs physically; map through CUDA_VISIBLE_DEVICES when it lists plain indices. None where it
    names this device by UUID (as the server pins its jobs): the UUID lookup above is then the only safe one, since
    CUDA's device 0 is that GPU and NVML's index 0 may be another."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if visible == [""] or index >= len(visible):
        return index
    entry = visible[index].strip()
    return int(entry) if entry.isdigit() else None


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
