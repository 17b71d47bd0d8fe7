"""GPU-only checks: TF32 switches, fp16/bf16 autocast on CUDA, the memory figures and the out-of-memory error.

Skipped without CUDA; on a GPU machine run `python -m pytest -q tests/trainer/test_cuda.py`.
"""

import pytest
import torch
from torch import nn

from trainer.config import RunConfig
from trainer.errors import OutOfMemoryError, UnsupportedModeError
from trainer.model import SimpleCNN
from trainer.precision import PrecisionPolicy, tf32_flags
from trainer.run import run_training

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TINY = dict(data="synthetic", device="cuda", loader="resident", num_workers=0, epochs=1, batch_size=64,
            subset=256, test_subset=128, log_every=2, warmup_steps=1)


def _capability() -> tuple[int, int]:
    return torch.cuda.get_device_capability()


def test_fp32_switches_tf32_off_and_records_it():
    result = run_training(RunConfig(precision="fp32", **TINY))
    assert result.environment["cuda_matmul_allow_tf32"] is False
    assert result.environment["cudnn_allow_tf32"] is False
    assert tf32_flags()["cuda_matmul_allow_tf32"] is False  # read as set: the old flags warn or raise on new torch


def test_tf32_needs_ampere():
    if _capability() < (8, 0):
        with pytest.raises(UnsupportedModeError, match="8.0"):
            PrecisionPolicy.resolve("tf32", "cuda")
        return
    flags = PrecisionPolicy.resolve("tf32", "cuda").apply_backend_flags()
    assert flags["cuda_matmul_allow_tf32"] and flags["cudnn_allow_tf32"]


@pytest.mark.parametrize("name, low", [("amp-fp16", torch.float16), ("amp-bf16", torch.bfloat16)])
def test_autocast_dtypes_on_cuda(name, low):
    if name == "amp-bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        with pytest.raises(UnsupportedModeError):
            PrecisionPolicy.resolve(name, "cuda")
        return
    policy = PrecisionPolicy.resolve(name, "cuda")
    model = SimpleCNN().cuda()
    with policy.autocast():
        logits = model(torch.randn(8, 3, 32, 32, device="cuda"))
        loss = nn.CrossEntropyLoss()(logits, torch.randint(0, 10, (8,), device="cuda"))
    assert logits.dtype == low and loss.dtype == torch.float32
    loss.backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())


def test_a_cuda_run_reports_every_memory_figure_and_the_scale():
    result = run_training(RunConfig(precision="amp-fp16", **TINY))
    assert result.peak_memory["torch_max_allocated"] > 0
    assert result.peak_memory["torch_max_reserved"] >= result.peak_memory["torch_max_allocated"]
    nvml = {"nvml_process_used", "nvml_device_used"} & result.peak_memory.keys()
    if nvml:
        # This process's own use (v2 / per pid) holds its context, the data and everything PyTorch reserved.
        assert result.peak_memory[nvml.pop()] >= result.peak_memory["torch_max_reserved"] + result.resident_data_bytes
    else:
        assert any("pynvml" in w for w in result.warnings)
    assert len(result.loss_scale_history) == result.total_steps
    assert result.environment["compute_capability"] == "{}.{}".format(*_capability())


def test_the_resident_data_is_its_own_figure_not_training_memory():
    # The whole split, 50,000 images, is 615 MB of fp32 on the GPU; the lab's model at batch 64 needs about 60 MB to
    # train, up to about 110 MB with cuBLAS's workspace (32 MiB on Hopper) and cuDNN's in the allocator: well under
    # half the data (with 16,384 images, half the data was about that 110 MB).
    config = RunConfig(precision="fp32", **{**TINY, "subset": None, "test_subset": 64, "batch_size": 64})
    result = run_training(config)
    assert result.resident_data_bytes == (50_000 + 64) * (3 * 32 * 32 * 4 + 8)
    assert result.peak_memory["torch_max_allocated"] < result.resident_data_bytes / 2


def test_a_batch_that_does_not_fit_is_one_line_and_frees_the_gpu():
    free, _total = torch.cuda.mem_get_info()
    hog = torch.empty(max(0, free - 256 * 2**20), dtype=torch.uint8, device="cuda")  # leave ~256 MiB
    before = torch.cuda.memory_allocated()
    try:
        with pytest.raises(OutOfMemoryError) as caught:
            run_training(RunConfig(precision="amp-fp16", **{**TINY, "batch_size": 4096, "subset": 4096, "width": 8}))
        message = str(caught.value)
        assert "\n" not in message
        assert "batch size 4096" in message and "amp-fp16" in message and "GiB" in message
        assert "batch size of 2048" in message
        assert torch.cuda.memory_allocated() <= before
    finally:
        del hog
        torch.cuda.empty_cache()
