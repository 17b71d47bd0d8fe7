import pytest

from server.devices import server_slots
from trainer.capabilities import GpuInfo
from trainer.errors import ConfigError, TrainerError

FOUR = [GpuInfo(n, f"GPU-{n}aaa", "NVIDIA H100 80GB HBM3") for n in range(4)]


def test_a_cpu_server_has_one_slot_and_pins_nothing():
    (slot,) = server_slots("cpu", find=lambda: pytest.fail("a CPU server must not look for GPUs"))
    assert (slot.label, slot.env, slot.gpu) == ("cpu", {}, None)


def test_one_slot_per_gpu_pinned_by_uuid():
    slots = server_slots("cuda", find=lambda: FOUR)
    assert [s.label for s in slots] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    assert slots[2].env == {"CUDA_VISIBLE_DEVICES": "GPU-2aaa"}
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
