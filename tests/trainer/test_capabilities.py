"""What can run here: which modes a device runs (and why not), and the note for a GPU that the driver sees and this
PyTorch cannot use."""

import pytest
import torch

from trainer.capabilities import (
    MIN_DRIVER_FOR_CUDA,
    DeviceFacts,
    GpuInfo,
    mode_support,
    unseen_gpu_note,
    visible_gpus,
)
from trainer.config import PRECISIONS
from trainer.errors import TrainerError, UnsupportedModeError


class FakeNvml:
    """pynvml's driver and device count, over a made-up machine."""

    def __init__(self, count: int, driver=b"535.104.05", fails: bool = False):
        self.count, self.driver, self.fails = count, driver, fails

    def nvmlInit(self):
        if self.fails:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlSystemGetDriverVersion(self):
        return self.driver


@pytest.fixture
def torch_sees_no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_gpu_that_this_torch_cannot_use_is_one_line_with_the_driver_it_needs(torch_sees_no_gpu, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    note = unseen_gpu_note(FakeNvml(2))
    assert note == ("the NVIDIA driver 535.104.05 sees 2 GPUs, but this PyTorch (built for CUDA 13.0) cannot use "
                    f"them: runs use the CPU; update the driver to {MIN_DRIVER_FOR_CUDA[13]} or newer")


def test_a_cpu_build_of_torch_is_named_as_the_reason(torch_sees_no_gpu, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "is built without CUDA" in unseen_gpu_note(FakeNvml(1, driver="550.54.15"))


@pytest.mark.parametrize("nvml", [FakeNvml(0), FakeNvml(1, fails=True)])
def test_nothing_to_say_without_a_gpu_or_a_driver(torch_sees_no_gpu, nvml):
    assert unseen_gpu_note(nvml) is None


def test_nothing_to_say_when_torch_uses_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert unseen_gpu_note(FakeNvml(1)) is None


class FakeNvmlGpus(FakeNvml):
    """Adds the per-GPU calls visible_gpus makes."""

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}0c0ffee"

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"


def test_visible_gpus_come_from_nvml_with_their_uuids(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1,3")
    gpus = visible_gpus(FakeNvmlGpus(4))
    assert gpus == [GpuInfo(1, "GPU-10c0ffee", "NVIDIA H200"), GpuInfo(3, "GPU-30c0ffee", "NVIDIA H200")]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(TrainerError, match="NVML lists 2 usable GPU"):
        visible_gpus(FakeNvmlGpus(4))
    with pytest.raises(TrainerError, match="cannot list the GPUs through NVML"):
        visible_gpus(FakeNvmlGpus(4, fails=True))


def test_no_gpu_means_no_nvml_call(torch_sees_no_gpu):
    assert visible_gpus(object()) == []


CPU_FACTS = DeviceFacts("cpu")
VOLTA = DeviceFacts("cuda", "7.0", native_bf16=False)
AMPERE = DeviceFacts("cuda", "8.0", native_bf16=True)


def test_fp32_default_runs_everywhere_and_is_strict_fp32_where_there_is_no_tf32():
    for facts in (CPU_FACTS, VOLTA):
        support = mode_support(facts)
        assert support.runs("fp32-default") and support.same_as == {"fp32-default": "fp32"}
        assert "computes exactly as fp32" in support.warnings["fp32-default"]
    assert "capability 8.0 or newer, and it has 7.0" in mode_support(VOLTA).warnings["fp32-default"]
    ampere = mode_support(AMPERE)
    assert ampere.runs("fp32-default") and ampere.runs("tf32")
    assert "fp32-default" not in ampere.same_as and "fp32-default" not in ampere.warnings


def test_every_training_mode_is_sorted_with_a_reason_for_each_refusal():
    for facts in (CPU_FACTS, VOLTA, AMPERE, DeviceFacts("mps")):
        support = mode_support(facts)
        assert set(support.supported) | set(support.refused) == set(PRECISIONS) | {"amp-fp16-unscaled", "fp16-true",
                                                                                  "bf16-true"}
        assert not set(support.supported) & set(support.refused)
    assert "tf32 needs an NVIDIA GPU" in mode_support(CPU_FACTS).refused["tf32"]
    with pytest.raises(UnsupportedModeError, match="not supported"):
        mode_support(DeviceFacts("mps")).check("fp32-default")
