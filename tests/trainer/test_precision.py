"""The precision policy: which modes run where, and what autocast does to dtypes on the CPU."""

import warnings

import pytest
import torch
from torch import nn

from trainer.capabilities import CPU_FP16_WARNING, CPU_FP32_DEFAULT_NOTE
from trainer.child_process import run_python_json
from trainer.errors import ConfigError, UnsupportedModeError
from trainer.model import SimpleCNN
from trainer.precision import PrecisionPolicy, restore_tf32_defaults, set_tf32, tf32_flags


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
    with pytest.raises(ConfigError, match="fp32, fp32-default, tf32, amp-fp16, amp-bf16"):
        PrecisionPolicy.resolve("fp8", "cpu")


def test_on_cpu_fp16_carries_a_warning_and_fp32_default_a_note():
    assert PrecisionPolicy.resolve("amp-fp16", "cpu").warnings == (CPU_FP16_WARNING,)
    assert PrecisionPolicy.resolve("amp-bf16", "cpu").warnings == ()
    assert PrecisionPolicy.resolve("fp32", "cpu").warnings == ()
    assert PrecisionPolicy.resolve("fp32-default", "cpu").warnings == (CPU_FP32_DEFAULT_NOTE,)


def test_fp32_default_is_fp32_that_leaves_tf32_to_pytorch():
    policy = PrecisionPolicy.resolve("fp32-default", "cpu")
    assert (policy.autocast_dtype, policy.use_scaler, policy.allow_tf32) == (None, False, None)
    assert not policy.make_scaler().is_enabled()


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


@pytest.fixture
def tf32_restored():
    """Put the process-wide TF32 switches back as they were (set_tf32 writes them on any device)."""
    b = torch.backends
    if hasattr(b.cudnn, "conv"):
        switches = [(b, "fp32_precision"), (b.cudnn, "fp32_precision"), (b.cuda.matmul, "fp32_precision"),
                    (b.cudnn.conv, "fp32_precision"), (b.cudnn.rnn, "fp32_precision")]
    else:
        switches = [(b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32")]
    before = [getattr(owner, name) for owner, name in switches]
    yield
    for (owner, name), value in zip(switches, before):
        setattr(owner, name, value)


@pytest.mark.parametrize("mode", ["fp32", "amp-bf16", "amp-fp16"])
def test_strict_modes_record_tf32_off_on_any_device(mode, tf32_restored):
    set_tf32(True)  # whatever an earlier run in this process left
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flags = PrecisionPolicy.resolve(mode, "cpu").apply_backend_flags()
    assert (flags["cuda_matmul_allow_tf32"], flags["cudnn_allow_tf32"]) == (False, False)
    if "cudnn_conv_fp32_precision" in flags:
        assert flags["cuda_matmul_fp32_precision"] == flags["cudnn_conv_fp32_precision"] == "ieee"


# Each mode in turn in one fresh Python, as a process that trains several times would: fp32-default first (it
# must write nothing), then strict fp32, then fp32-default again (it must put PyTorch's defaults back).
_MODES_IN_ONE_PROCESS = """
import json, warnings
warnings.simplefilter("error")
from trainer.precision import PrecisionPolicy, _tf32_switches, tf32_flags
raw = lambda: [getattr(owner, name) for owner, name in _tf32_switches()]
fresh_raw, fresh = raw(), tf32_flags()
seen = {"fresh": fresh}
for step, mode in enumerate(("fp32-default", "fp32", "fp32-default")):
    seen[f"{step} {mode}"] = PrecisionPolicy.resolve(mode, "cpu").apply_backend_flags()
    seen[f"{step} {mode} raw unchanged"] = raw() == fresh_raw
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_fp32_default_leaves_the_switches_as_pytorch_sets_them_and_records_them():
    seen = run_python_json(["-c", _MODES_IN_ONE_PROCESS], timeout_s=120)
    fresh = seen["fresh"]
    assert seen["0 fp32-default"] == fresh and seen["0 fp32-default raw unchanged"]
    assert seen["1 fp32"]["cudnn_allow_tf32"] is False and not seen["1 fp32 raw unchanged"]
    assert seen["2 fp32-default"] == fresh and seen["2 fp32-default raw unchanged"]
    # PyTorch's defaults since 1.12: cuDNN convolutions may use TF32, matmuls are full fp32.
    assert (fresh["cudnn_allow_tf32"], fresh["cuda_matmul_allow_tf32"]) == (True, False)


def test_fp32_default_puts_back_what_this_process_started_with(tf32_restored):
    set_tf32(False)
    flags = PrecisionPolicy.resolve("fp32-default", "cpu").apply_backend_flags()
    restore_tf32_defaults()  # once put back, a second time changes nothing
    assert tf32_flags() == flags
    set_tf32(True)
    assert PrecisionPolicy.resolve("fp32-default", "cpu").apply_backend_flags() == flags


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_each_fp32_mode_records_its_tf32_switches(tf32_restored):
    read = "import json; from trainer.precision import tf32_flags; print(json.dumps(tf32_flags()))"
    fresh = run_python_json(["-c", read], timeout_s=120)
    if torch.cuda.get_device_capability() >= (8, 0):
        on = PrecisionPolicy.resolve("tf32", "cuda").apply_backend_flags()
        assert on["cuda_matmul_allow_tf32"] and on["cudnn_allow_tf32"]
    strict = PrecisionPolicy.resolve("fp32", "cuda").apply_backend_flags()
    assert not strict["cuda_matmul_allow_tf32"] and not strict["cudnn_allow_tf32"]
    default = PrecisionPolicy.resolve("fp32-default", "cuda").apply_backend_flags()
    assert {k: v for k, v in default.items() if k != "cudnn_benchmark"} == {
        k: v for k, v in fresh.items() if k != "cudnn_benchmark"}


@pytest.mark.parametrize("enabled", [True, False, True])
def test_tf32_is_set_and_read_through_one_api_of_the_running_torch(enabled, tf32_restored):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch 2.9-2.10 warn on the old flags; a later read may raise on newer ones
        set_tf32(enabled)
        flags = tf32_flags()
    assert flags["cuda_matmul_allow_tf32"] is enabled and flags["cudnn_allow_tf32"] is enabled
    if hasattr(torch.backends.cudnn, "conv"):  # torch with the fp32_precision API
        expected = "tf32" if enabled else "ieee"
        assert torch.backends.cuda.matmul.fp32_precision == torch.backends.cudnn.conv.fp32_precision == expected
        assert flags["cuda_matmul_fp32_precision"] == flags["cudnn_conv_fp32_precision"] == expected
        assert "float32_matmul_precision" not in flags  # the old reader warns or raises on this torch
    else:
        assert torch.backends.cuda.matmul.allow_tf32 is enabled and torch.backends.cudnn.allow_tf32 is enabled


@pytest.mark.skipif(not hasattr(torch.backends.cudnn, "conv"), reason="needs torch with the fp32_precision API")
def test_an_inherited_precision_is_read_from_its_parent(tf32_restored):
    set_tf32(False)
    torch.backends.cuda.matmul.fp32_precision = "none"  # inherits from the CUDA backend, then the generic setting
    torch.backends.cudnn.fp32_precision = "tf32"
    assert tf32_flags()["cuda_matmul_allow_tf32"] is True
    torch.backends.cudnn.fp32_precision = torch.backends.fp32_precision = "none"
    assert tf32_flags()["cuda_matmul_fp32_precision"] == "ieee"


def test_scaler_settings_reach_the_scaler_and_an_over_high_start_backs_off():
    from trainer.loop import train_step

    policy = PrecisionPolicy.resolve("amp-fp16", "cpu", loss_scale_init=2.0**24, loss_scale_growth_interval=5)
    scaler = policy.make_scaler()
    assert (scaler.get_scale(), scaler.get_growth_interval()) == (2.0**24, 5)
    torch.manual_seed(0)
    model = SimpleCNN()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    train_step(model, images, labels, optimizer, nn.CrossEntropyLoss(), policy, scaler)
    # 2^24 times the logits' gradient (about 1/4 here) is far past fp16's 65504: the step is skipped, the scale halves.
    assert scaler.get_scale() == 2.0**23
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    default = PrecisionPolicy.resolve("amp-fp16", "cpu").make_scaler()
    assert (default.get_scale(), default.get_growth_interval()) == (65536.0, 2000)


def test_scaler_settings_are_validated_and_recorded():
    from trainer.config import RunConfig

    config = RunConfig(precision="amp-fp16", loss_scale_init=2.0**24, loss_scale_growth_interval=5).validate()
    assert RunConfig.from_dict(config.to_dict()) == config and not config.default_scaler
    assert RunConfig().default_scaler and RunConfig.from_dict({"precision": "fp32"}).default_scaler
    for bad in ({"loss_scale_init": 0.5}, {"loss_scale_init": 2.0**40}, {"loss_scale_init": True},
                {"loss_scale_growth_interval": 0}, {"loss_scale_growth_interval": 2.5}):
        with pytest.raises(ConfigError, match="loss scale"):
            RunConfig(**bad).validate()
