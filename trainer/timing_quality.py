"""How far a run's timing can be trusted: the spread of its throughput over the timed window, and what else used
the machine meanwhile (other processes' CPU, the hypervisor's steal, other work on the same GPU, GPU clocks).

The loop hands the monitor a synced clock and the image count at fixed step intervals after warm-up; the monitor
adds CPU accounting from /proc/stat and psutil at the window's two ends. The record it returns is
RunResult.timing_quality: {"verdict": "steady" | "noisy", "cv": float | None, "reasons": [one line each], ...}.
The thresholds were measured on this project's 2-core CPU, quiet and with a CPU burner on every core
(bench/README.md, "Timing quality").
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import psutil

MIN_STEPS_TO_TIME = 30  # a run shorter than this is mostly warm-up: its speedup is not a measurement (one place)
MIN_INTERVALS = 8  # throughput samples a run should have after warm-up; short runs sample more often than log_every
MIN_INTERVALS_FOR_CV = 3  # fewer than this and the spread is not measured
# Measured on the project's 2-core CPU (bench/README.md, "Timing quality"): quiet runs had other processes at 0-3.5%
# of the cores and a spread of 2-21% (the high end only in 1.7 s windows, whose intervals are three steps long);
# loaded runs had others at 50-85% but a spread as low as 1%. So the other-CPU share is the test for competing load,
# and the spread's threshold sits above the quiet machine's worst short window.
NOISY_CV = 0.25  # per-interval throughput spread (std / mean) above which a run is noisy
NOISY_OTHER_CPU = 0.15  # share of all cores' time that other processes used during the timed window
NOISY_STEAL = 0.05  # share of the cores' time the hypervisor gave to other virtual machines
MIN_WINDOW_S = 0.3  # /proc/stat counts in 10 ms ticks: a shorter window says nothing about other processes
# Where NVML cannot say why a clock is low: a busy GPU's SM clock below this share of its highest busy reading in the
# window is taken as throttling (idle samples are left out: a GPU lowers its clock while it waits for data).
GPU_CLOCK_DROP = 0.9


def interval_steps(steps_after_warmup: int, log_every: int) -> int:
    """Steps between two throughput samples: the log interval, shortened so that MIN_INTERVALS fit in the run."""
    return max(1, min(log_every, steps_after_warmup // MIN_INTERVALS))


@dataclass
class CpuSample:
    """Cumulative CPU seconds at one moment: the whole machine's from /proc/stat, and this process tree's."""

    wall_s: float  # time.perf_counter() when read
    busy_s: float  # all cores, every process: user, nice, system, irq, softirq
    steal_s: float
    own_s: float  # this process, its finished children and its live children (DataLoader workers)
    workers_s: float  # the live and finished children alone
    cores: int


def cpu_sample() -> CpuSample | None:
    """The counters now; None where /proc/stat cannot be read (not Linux)."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    fields = [float(x) for x in lines[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0.0
    cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    me = psutil.Process()
    times = me.cpu_times()
    workers = times.children_user + times.children_system
    for child in me.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.Error:  # a worker that exited between listing and reading
            continue
        workers += child_times.user + child_times.system
    return CpuSample(
        wall_s=time.perf_counter(),
        busy_s=(user + nice + system + irq + softirq) / ticks,
        steal_s=steal / ticks,
        own_s=times.user + times.system + workers,
        workers_s=workers,
        cores=cores or (os.cpu_count() or 1),
    )


class TimingMonitor:
    """Collects (seconds, images) samples over the timed window and the CPU counters at its two ends.

    The loop calls `start` at the end of warm-up, `mark` every `interval_steps(...)` steps and `stop` at the end,
    each time with a clock read after a device sync and with partial batches already left out of both figures;
    `record` then builds the timing_quality record, with GPU figures for the window if there are any.
    """

    def __init__(self):
        self.points: list[tuple[float, int]] = []
        self._cpu: list[CpuSample] = []
        self.worker_cpu_s: float | None = None  # the DataLoader workers' CPU seconds over the timed window

    def start(self, seconds: float, images: int) -> None:
        self.points = [(seconds, images)]
        self._cpu = [s for s in [cpu_sample()] if s is not None]

    def mark(self, seconds: float, images: int) -> None:
        if self.points:
            self.points.append((seconds, images))

    def stop(self, seconds: float, images: int) -> None:
        if not self.points:
            return
        end = cpu_sample()
        if self._cpu and end is not None:
            self._cpu.append(end)
            self.worker_cpu_s = max(0.0, end.workers_s - self._cpu[0].workers_s)
        if self.points[-1][1] < images:
            self.points.append((seconds, images))

    @property
    def window(self) -> tuple[float, float] | None:
        """perf_counter() at the start and end of the timed window, for other samplers to match."""
        return (self._cpu[0].wall_s, self._cpu[-1].wall_s) if len(self._cpu) == 2 else None

    def record(self, gpu: dict | None = None) -> dict | None:
        """The timing_quality record; None when the run never left warm-up."""
        if not self.points:
            return None
        cpu = cpu_shares(*self._cpu) if len(self._cpu) == 2 else None
        window_s = self._cpu[1].wall_s - self._cpu[0].wall_s if cpu else 0.0
        return assess(interval_throughputs(self.points), cpu, gpu, window_s)


def interval_throughputs(points: list[tuple[float, int]]) -> list[float]:
    """Images per second between consecutive samples; an interval under half the usual size (an epoch's short
    tail) is left out, since a single step's time is noisier than the rest."""
    sizes = [b[1] - a[1] for a, b in zip(points, points[1:])]
    if not sizes:
        return []
    usual = statistics.median(sizes)
    return [
        (b[1] - a[1]) / (b[0] - a[0])
        for a, b in zip(points, points[1:])
        if b[0] > a[0] and b[1] - a[1] >= usual / 2
    ]


def cpu_shares(start: CpuSample, end: CpuSample) -> dict:
    window_s = end.wall_s - start.wall_s
    capacity = window_s * end.cores
    busy = end.busy_s - start.busy_s
    own = end.own_s - start.own_s
    shares = {"cores": end.cores, "load_avg_1min": round(os.getloadavg()[0], 2), "window_s": round(window_s, 3)}
    if capacity > 0:
        shares["other_cpu_share"] = round(max(0.0, busy - own) / capacity, 4)
        shares["steal_share"] = round(max(0.0, end.steal_s - start.steal_s) / capacity, 4)
    return shares


def assess(throughputs: list[float], cpu: dict | None, gpu: dict | None, window_s: float) -> dict:
    """The verdict from the measured figures: noisy when any of them crosses its threshold, each crossing one
    reason naming what disturbed the run."""
    cv = None
    if len(throughputs) >= MIN_INTERVALS_FOR_CV:
        cv = statistics.pstdev(throughputs) / statistics.fmean(throughputs)
    reasons = []
    if cv is not None and cv > NOISY_CV:
        reasons.append(
            f"throughput varied by {cv:.0%} (std/mean) between {len(throughputs)} intervals after warm-up, "
            f"more than the {NOISY_CV:.0%} a quiet machine stays under"
        )
    record = {"cv": None if cv is None else round(cv, 4), "intervals": len(throughputs)}
    if cpu is not None:
        record.update(cpu)
        others, steal = cpu.get("other_cpu_share", 0.0), cpu.get("steal_share", 0.0)
        if window_s >= MIN_WINDOW_S and others > NOISY_OTHER_CPU:
            reasons.append(
                f"other processes used {others:.0%} of the {cpu['cores']} CPU cores while this run was timed "
                f"(load average {cpu['load_avg_1min']:.1f} on {cpu['cores']} cores): competing load slowed it"
            )
        if window_s >= MIN_WINDOW_S and steal > NOISY_STEAL:
            reasons.append(
                f"the hypervisor gave {steal:.0%} of the CPU time to other virtual machines (steal) during the run"
            )
    if gpu:
        record["gpu"] = gpu
        reasons.extend(_gpu_reasons(gpu))
    record["verdict"] = "noisy" if reasons else "steady"
    record["reasons"] = reasons
    return record


def _gpu_reasons(gpu: dict) -> list[str]:
    reasons = []
    if gpu.get("other_processes"):
        reasons.append(
            f"{gpu['other_processes']} other process(es) computed on the same GPU while this run was timed"
        )
    low, high = gpu.get("sm_clock_min_mhz"), gpu.get("sm_clock_max_mhz")
    clocks = f" (SM clock {high:.0f} to {low:.0f} MHz while busy)" if low and high else ""
    slowdowns = gpu.get("slowdown_samples")
    if slowdowns is not None:  # NVML said why the clock was low in each sample: only power and heat count
        if slowdowns:
            reasons.append(f"the GPU held its clock down for power or heat in {slowdowns} of {gpu.get('samples')} "
                           f"samples during the run{clocks}")
    elif low and high and low < GPU_CLOCK_DROP * high:  # no reasons from NVML: a busy GPU's clock fell
        reasons.append(
            f"the GPU's SM clock fell from {high:.0f} to {low:.0f} MHz while it computed (power or heat throttling)"
        )
    return reasons


def is_noisy(record: dict | None) -> bool:
    return bool(record) and record.get("verdict") == "noisy"
