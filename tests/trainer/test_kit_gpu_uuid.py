"""Issue 22, item 12: a run's record names its GPU as NVML does, "GPU-..." for a whole GPU and "MIG-..." for a MIG
slice, never "GPU-" in front of a MIG slice's UUID. The GPU is simulated: torch's device properties, and NVML."""

import sys
import types

import pytest
import torch

from trainer.environment import capture_environment, nvml_uuid

BARE = "1f2e3d4c-0000-1111-2222-333344445555"  # torch's str(props.uuid): the same bare form for both kinds


def fake_nvml(known: set[str]) -> types.ModuleType:
    """A pynvml that knows the devices of these UUIDs (and fails the lookup of any other, as NVML does)."""
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def handle_by_uuid(uuid):
        if uuid not in known:
            raise NVMLError("Not Found")
        return ("handle", uuid)

    module.NVMLError = NVMLError
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: None
    module.nvmlDeviceGetHandleByUUID = handle_by_uuid
    return module


@pytest.fixture
def nvml(monkeypatch):
    def install(*known: str) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(set(known)))

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return install


def test_a_whole_gpu_is_spelt_gpu(nvml):
    nvml(f"GPU-{BARE}")
    assert nvml_uuid(BARE, 0) == f"GPU-{BARE}"


def test_a_mig_slice_known_to_nvml_is_spelt_mig(nvml):
    nvml(f"MIG-{BARE}")
    assert nvml_uuid(BARE, 0) == f"MIG-{BARE}"


def test_a_mig_slice_named_by_cuda_visible_devices_is_spelt_mig_without_nvml(nvml, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` fails: no NVML to ask
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"MIG-{BARE}")
    assert nvml_uuid(BARE, 0) == f"MIG-{BARE}"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert nvml_uuid(BARE, 0) == f"GPU-{BARE}"  # without NVML a device named by index is taken for a whole GPU


@pytest.mark.parametrize("spelt", [f"MIG-{BARE}", f"GPU-{BARE}"])
def test_a_uuid_already_spelt_as_nvml_does_is_kept(nvml, spelt):
    nvml()
    assert nvml_uuid(spelt, 0) == spelt


def test_the_environment_record_of_a_run_on_a_mig_slice(nvml, monkeypatch):
    """capture_environment on a pretend CUDA device: an H200 MIG slice, as torch and NVML describe it."""
    props = types.SimpleNamespace(name="NVIDIA H200 MIG 1g.18gb", major=9, minor=0, total_memory=18 * 2**30,
                                  uuid=BARE)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    nvml(f"MIG-{BARE}")
    env = capture_environment(torch.device("cuda"))
    assert env["gpu_uuid"] == f"MIG-{BARE}" and "GPU-" not in env["gpu_uuid"]
    assert (env["device_name"], env["compute_capability"]) == ("NVIDIA H200 MIG 1g.18gb", "9.0")
