"""What can run here: the note for a GPU that the driver sees and this PyTorch cannot use."""

import pytest
import torch

from trainer.capabilities import MIN_DRIVER_FOR_CUDA, unseen_gpu_note


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
