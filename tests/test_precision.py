"""The precision policy: which modes run where, and what autocast does to dtypes on the CPU."""

import pytest
import torch
from torch import nn

from trainer.capabilities import CPU_FP16_WARNING
from trainer.errors import ConfigError, UnsupportedModeError
from trainer.model import SimpleCNN
from trainer.precision import PrecisionPolicy


@pytest.mark.parametrize(
    "name, autocast_dtype, use_scaler",
    [("fp32", None, False), ("amp-bf16", torch.bfloat16, False), ("amp-fp16", torch.float16, True)],
)
def test_cpu_policy_per_mode(name, autocast_dtype, use_scaler):
    policy = PrecisionPolicy.resolve(name, "cpu")
    assert policy.autocast_dtype == autocast_dtype
    assert policy.use_scaler == use_scaler
    assert policy.make_scaler().is_enabled() == use_scaler
    assert policy.allow_tf32 is False


def test_tf32_on_cpu_is_unsupported():
    with pytest.raises(UnsupportedModeError, match="tf32"):
        PrecisionPolicy.resolve("tf32", "cpu")


def test_unknown_precision_lists_the_allowed_names():
    with pytest.raises(ConfigError, match="fp32, tf32, amp-fp16, amp-bf16"):
        PrecisionPolicy.resolve("fp8", "cpu")


def test_only_fp16_on_cpu_carries_a_warning():
    assert PrecisionPolicy.resolve("amp-fp16", "cpu").warnings == (CPU_FP16_WARNING,)
    assert PrecisionPolicy.resolve("amp-bf16", "cpu").warnings == ()
    assert PrecisionPolicy.resolve("fp32", "cpu").warnings == ()


def test_fp32_autocast_is_a_disabled_context():
    policy = PrecisionPolicy.resolve("fp32", "cpu")
    layer = nn.Linear(8, 4)
    with policy.autocast():
        assert not torch.is_autocast_enabled("cpu")
        assert layer(torch.randn(2, 8)).dtype == torch.float32


@pytest.mark.parametrize("name, low", [("amp-bf16", torch.bfloat16), ("amp-fp16", torch.float16)])
def test_autocast_dtypes_on_cpu(name, low):
    """Conv and linear outputs drop to the low dtype, the loss stays fp32, weights and grads stay fp32."""
    policy = PrecisionPolicy.resolve(name, "cpu")
    torch.manual_seed(0)
    model = SimpleCNN(width=1)
    images, labels = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    seen = {}
    hooks = [
        module.register_forward_hook(lambda m, i, out, key=key: seen.__setitem__(key, out.dtype))
        for key, module in (("conv", model.features[0]), ("linear", model.classifier[2]))
    ]
    with policy.autocast():
        logits = model(images)
        loss = nn.CrossEntropyLoss()(logits, labels)
    for hook in hooks:
        hook.remove()
    assert seen == {"conv": low, "linear": low}
    assert logits.dtype == low
    assert loss.dtype == torch.float32
    loss.backward()
    for param in model.parameters():
        assert param.dtype == torch.float32
        assert param.grad.dtype == torch.float32


def test_backend_flags_are_recorded_on_cpu():
    flags = PrecisionPolicy.resolve("fp32", "cpu").apply_backend_flags()
    assert {"cuda_matmul_allow_tf32", "cudnn_allow_tf32", "cudnn_benchmark"} <= flags.keys()
