import pytest

from server.devices import server_slots
from trainer.capabilities import GpuInfo
from trainer.errors import ConfigError, TrainerError

FOUR = [GpuInfo(n, f"GPU-{n}aaa", "NVIDIA H100 80GB HBM3") for n in range(4)]


def test_a_cpu_server_has_one_slot_and_pins_nothing():
    (slot,) = server_slots("cpu", find=lambda: pytest.fail("a CPU server must not look for GPUs"))
    assert (slot.label, slot.env, slot.gpu) == ("cpu", {}, None)


def test_one_slot_per_gpu_pinned_by_uuid_with_its_own_share_of_the_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    slots = server_slots("cuda", find=lambda: FOUR)
    assert [s.label for s in slots] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    assert slots[2].env == {"CUDA_VISIBLE_DEVICES": "GPU-2aaa", "AMP_LAB_CPU_CORES": "8-11"}
    assert [s.env["AMP_LAB_CPU_CORES"] for s in slots] == ["0-3", "4-7", "8-11", "12-15"]
    (alone,) = server_slots("cuda", [1], find=lambda: FOUR)
    assert "AMP_LAB_CPU_CORES" not in alone.env  # one job at a time: it has the whole machine
    assert slots[2].gpu == {"index": 2, "uuid": "GPU-2aaa", "name": "NVIDIA H100 80GB HBM3"}


def test_the_instructor_picks_gpus_by_nvidia_smi_number():
    assert [s.label for s in server_slots("cuda", [1, 3], find=lambda: FOUR)] == ["GPU 1", "GPU 3"]
    with pytest.raises(ConfigError, match="names GPU 7, but this server's GPUs are 0, 1, 2, 3"):
        server_slots("cuda", [0, 7], find=lambda: FOUR)


def test_without_nvml_one_unpinned_worker_unless_gpus_were_asked_for():
    def broken():
        raise TrainerError("cannot list the GPUs through NVML (libnvidia-ml.so.1 missing)")

    (slot,) = server_slots("cuda", find=broken)
    assert (slot.label, slot.env) == ("cuda", {})
    with pytest.raises(ConfigError, match="gpus setting cannot be applied"):
        server_slots("cuda", [0], find=broken)


@pytest.mark.slow
def test_the_server_lists_gpus_without_initialising_cuda_and_numbers_them_as_nvidia_smi():
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import os, sys, serve; print(os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'], os.environ['CUDA_DEVICE_ORDER'], "
             "'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_NVML_BASED_CUDA_CHECK", "CUDA_DEVICE_ORDER")}
    root = Path(__file__).resolve().parents[2]

    def serve_sets(extra: dict) -> str:
        return subprocess.run([sys.executable, "-c", probe], cwd=root, env={**env, **extra}, capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()

    assert serve_sets({}) == "1 PCI_BUS_ID False"  # set before torch was imported
    assert serve_sets({"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}) == "1 FASTEST_FIRST False"  # an operator's own wins
