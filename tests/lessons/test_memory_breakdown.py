"""The memory breakdown: components found through real tensors add up to what the allocator measured."""

import pytest
import torch

from lessons.memory_breakdown import (
    BACKWARD_EXTRA,
    ORDER,
    OTHER,
    POOL_INDICES,
    MemoryBreakdown,
    measure,
    measure_in_fresh_process,
)
from trainer.errors import ConfigError
from trainer.model import SimpleCNN

BATCH = 8


@pytest.fixture(scope="module")
def fp32_and_bf16():
    return measure("fp32", BATCH), measure("amp-bf16", BATCH)


def test_components_add_up_to_the_allocators_live_bytes_within_5_percent(fp32_and_bf16):
    for result in fp32_and_bf16:
        assert result.forward_components == pytest.approx(result.forward_live, rel=0.05)
        assert result.forward_components + result.components.get(OTHER, 0) == result.forward_live
        assert result.peak <= result.total <= result.peak * 1.05
        assert result.total == sum(row["bytes"] for row in result.rows())


def test_weights_gradients_and_momentum_stay_fp32_in_both_modes(fp32_and_bf16):
    weights = 4 * sum(p.numel() for p in SimpleCNN().parameters())
    for result in fp32_and_bf16:
        for name in ("weights (fp32)", "gradients (fp32)", "optimizer state (momentum, fp32)"):
            assert result.components[name] == weights


def test_amp_adds_weight_copies_and_halves_float_activations_but_not_pool_indices(fp32_and_bf16):
    fp32, bf16 = fp32_and_bf16
    assert "16-bit weight copies (autocast)" not in fp32.components
    assert bf16.components["16-bit weight copies (autocast)"] == pytest.approx(
        fp32.components["weights (fp32)"] / 2, rel=0.01)  # every conv and linear weight, in 2 bytes
    # Each max-pool keeps one int64 index per output value: 32x16x16 and 64x8x8 per image.
    assert fp32.components[POOL_INDICES] == bf16.components[POOL_INDICES] == 8 * BATCH * (32 * 16 * 16 + 64 * 8 * 8)
    assert bf16.components["saved activations: bfloat16"] < 0.6 * fp32.components["saved activations: float32"]
    assert set(bf16.components) <= set(ORDER) and BACKWARD_EXTRA in bf16.components


@pytest.mark.slow
def test_a_fresh_process_returns_the_same_breakdown_and_the_batch_is_checked():
    (found,) = measure_in_fresh_process(["fp32"], [4])
    assert isinstance(found, MemoryBreakdown) and found.batch_size == 4 and found.device == "cpu"
    assert found.forward_components == pytest.approx(found.forward_live, rel=0.05)
    assert MemoryBreakdown.from_dict(found.to_dict()) == found
    with pytest.raises(ConfigError, match="batch size"):
        measure("fp32", 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_context_and_the_allocators_cache_are_measured():
    result = measure("amp-fp16", 64, device="cuda")
    # cuBLAS keeps its workspace in the caching allocator, so the allocator counts more than the tensors found.
    assert result.forward_components <= result.forward_live
    assert result.components["allocator's cache (reserved, unused)"] >= 0
    assert result.process_total is None or result.components["CUDA context and libraries"] > 0
