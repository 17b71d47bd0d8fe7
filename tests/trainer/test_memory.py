"""The memory monitor: the CPU's resident peak, NVML's view of a GPU (faked), and memory in an out-of-memory line."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer import host_malloc
from trainer.memory import MemoryMonitor, _nvml_handle, _NvmlReader, _PeakSampler, device_memory_summary

MIB = 2**20


def test_cpu_memory_monitor_sees_a_large_allocation():
    monitor = MemoryMonitor(torch.device("cpu")).start()
    block = np.ones(200 * 2**20, dtype=np.uint8)  # 200 MiB, touched so that it is resident
    peaks = monitor.stop()
    del block
    assert peaks.keys() == {"process_rss_growth"}
    assert peaks["process_rss_growth"] >= 150 * 2**20
    assert monitor.warnings == []


def test_cpu_memory_monitor_counts_memory_that_a_tuned_malloc_had_kept_from_earlier_work():
    host_malloc.tune_for_training()
    earlier = np.ones(200 * 2**20, dtype=np.uint8)
    del earlier  # a tuned malloc keeps these pages resident for reuse
    monitor = MemoryMonitor(torch.device("cpu")).start()
    block = np.ones(200 * 2**20, dtype=np.uint8)
    peaks = monitor.stop()
    del block
    assert peaks["process_rss_growth"] >= 150 * 2**20


def test_cpu_memory_monitor_keeps_a_peak_that_was_freed_before_it_stopped():
    monitor = MemoryMonitor(torch.device("cpu")).start()
    block = np.ones(200 * 2**20, dtype=np.uint8)
    del block  # returned to the OS at once: only the kernel's high-water mark still knows about it
    assert monitor.stop()["process_rss_growth"] >= 150 * 2**20


def test_cpu_memory_summary_names_the_host_memory():
    assert "GiB host memory" in device_memory_summary(torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without an NVIDIA driver")
def test_without_nvml_the_device_figure_is_left_out_with_a_warning():
    monitor = MemoryMonitor(torch.device("cuda"))
    assert monitor._start_nvml() is None
    assert len(monitor.warnings) == 1 and "pynvml failed" in monitor.warnings[0]


class FakeNvml:
    """The few pynvml calls the monitor makes, over a made-up machine."""

    class NVMLError(Exception):
        pass

    nvmlMemory_v2 = 0x02000028

    def __init__(self, uuids=("GPU-aaaa",), processes=(), used_v1=900 * MIB, used_v2=800 * MIB):
        self.uuids, self.processes = list(uuids), list(processes)
        self.used_v1, self.used_v2 = used_v1, used_v2

    def nvmlDeviceGetCount(self):
        return len(self.uuids)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.uuids:
            raise self.NVMLError("Not Found")
        return ("uuid", uuid)

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("index", index)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        return SimpleNamespace(used=self.used_v2 if version == self.nvmlMemory_v2 else self.used_v1)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes]


@pytest.mark.parametrize("nvml_uuid", ["GPU-aaaa", "MIG-aaaa"])
def test_nvml_finds_a_whole_gpu_or_a_mig_slice_by_its_uuid(nvml_uuid):
    assert _nvml_handle(FakeNvml([nvml_uuid]), "aaaa", 0) == ("uuid", nvml_uuid)


def test_nvml_falls_back_to_the_index_only_where_cuda_numbers_gpus_as_nvml_does(monkeypatch):
    nvml = FakeNvml(["GPU-xxxx", "GPU-yyyy"])
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    with pytest.raises(LookupError):
        _nvml_handle(nvml, "aaaa", 0)  # CUDA's default order is fastest first, NVML's is the PCI bus
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert _nvml_handle(nvml, "aaaa", 0) == ("index", 1)
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _nvml_handle(FakeNvml(["GPU-only"]), "aaaa", 0) == ("index", 0)  # one GPU: no order to get wrong
    # A job pinned by UUID (as the server pins them) whose UUID NVML does not know: CUDA's device 0 is that GPU,
    # NVML's index 0 may be another, so no index is guessed.
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-zzzz")
    with pytest.raises(LookupError):
        _nvml_handle(nvml, "aaaa", 0)


def test_nvml_reports_this_process_and_warns_about_others():
    nvml = FakeNvml(processes=[(100, 700 * MIB), (200, 5000 * MIB)])
    reader = _NvmlReader(nvml, ("uuid", "GPU-aaaa"), pid=100)
    assert reader.label == "nvml_process_used" and reader.read() == 700 * MIB
    (warning,) = reader.warnings()
    assert warning.startswith("1 other process(es) computed on this GPU")


def test_nvml_without_this_process_listed_reports_the_device_from_the_v2_struct():
    nvml = FakeNvml(processes=[(1, None)])  # another pid namespace: the one process listed is this one
    reader = _NvmlReader(nvml, ("uuid", "GPU-aaaa"), pid=100)
    assert reader.label == "nvml_device_used" and reader.read() == 800 * MIB  # v2: the driver's reserve left out
    assert reader.warnings() == ["NVML does not list this process, so the nvidia-smi figure is the whole GPU's"]
    nvml.processes.append((2, None))
    reader.read()
    assert "1 other process(es)" in reader.warnings()[1]


def test_nvml_activity_in_the_timed_window_gives_the_clock_range_and_other_processes():
    nvml = FakeNvml(processes=[(100, 700 * MIB)])
    nvml.NVML_CLOCK_SM = 1
    clocks = iter([1980, 1400])
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: next(clocks)
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: SimpleNamespace(gpu=90)
    reader = _NvmlReader(nvml, ("uuid", "GPU-aaaa"), pid=100)
    start = time.perf_counter()
    reader.read()
    nvml.processes.append((200, 100 * MIB))
    reader.read()
    activity = reader.activity(start, time.perf_counter())
    assert activity["other_processes"] == 1 and activity["utilization_mean_pct"] == 90
    assert (activity["sm_clock_min_mhz"], activity["sm_clock_max_mhz"]) == (1400, 1980)
    assert reader.activity(0.0, start - 1) is None  # no sample in that window


def test_a_gpu_waiting_for_data_lowers_its_clock_without_counting_as_throttled():
    nvml = FakeNvml(processes=[(100, 700 * MIB)])
    nvml.NVML_CLOCK_SM = 1
    samples = iter([(1980, 97), (345, 5), (1965, 92)])  # computing, waiting for its next batch, computing
    current = {}
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: current["clock"]
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: SimpleNamespace(gpu=current["util"])
    reader = _NvmlReader(nvml, ("uuid", "GPU-aaaa"), pid=100)
    start = time.perf_counter()
    for clock_mhz, util in samples:
        current.update(clock=clock_mhz, util=util)
        reader.read()
    activity = reader.activity(start, time.perf_counter())
    assert (activity["sm_clock_min_mhz"], activity["sm_clock_max_mhz"]) == (1965, 1980)  # the idle 345 left out
    assert activity["slowdown_samples"] is None  # this fake NVML cannot say why a clock is low


def test_nvml_clock_reasons_count_only_power_and_heat():
    nvml = FakeNvml(processes=[(100, 700 * MIB)])
    reasons = iter([0x1, 0x4, 0x0, 0x40])  # idle, software power cap, none, hardware thermal slowdown
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: next(reasons)
    reader = _NvmlReader(nvml, ("uuid", "GPU-aaaa"), pid=100)
    start = time.perf_counter()
    for _ in range(4):
        reader.read()
    activity = reader.activity(start, time.perf_counter())
    assert activity["samples"] == 4 and activity["slowdown_samples"] == 2


def test_a_memory_reading_that_fails_mid_run_keeps_the_peak_so_far():
    readings = iter([100, 300])

    def read():
        value = next(readings, None)
        if value is None:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return value

    sampler = _PeakSampler(read, interval=0.001)  # reads 100
    sampler.start()
    deadline = time.monotonic() + 10
    while sampler.failed is None and time.monotonic() < deadline:  # the thread reads 300, then fails
        time.sleep(0.005)
    assert sampler.failed == "RuntimeError: NVML_ERROR_UNKNOWN"
    assert sampler.is_alive()  # a failed reading does not end the sampling
    assert sampler.stop() == 300  # nor does the last one, at the end of the run: the peak so far stands


def test_nvml_activity_without_clock_calls_still_counts_processes():
    reader = _NvmlReader(FakeNvml(processes=[(100, 700 * MIB)]), ("uuid", "GPU-aaaa"), pid=100)
    start = time.perf_counter()
    reader.read()
    activity = reader.activity(start, time.perf_counter())
    assert activity["other_processes"] == 0 and activity["sm_clock_min_mhz"] is None

