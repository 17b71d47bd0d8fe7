"""The environment record and the hardware report, on this machine and on pretend CPUs."""

import json

import pytest
import torch

import trainer.environment as environment
from trainer.environment import CPU_FLAGS_OF_INTEREST, HardwareReport, capture_environment, hardware_report


def _proc_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as handle:
            return next((set(line.split(":", 1)[1].split()) for line in handle if line.startswith("flags")), set())
    except OSError:
        return set()


def test_capture_environment_on_cpu_is_complete_and_json_ready():
    env = capture_environment(torch.device("cpu"))
    assert json.loads(json.dumps(env)) == env
    assert env["device_type"] == "cpu" and env["compute_capability"] is None
    assert env["torch_version"] == torch.__version__
    assert env["torch_threads"] == torch.get_num_threads() and env["logical_cores"] >= 1
    for key in ("cuda_matmul_allow_tf32", "cudnn_allow_tf32", "cudnn_benchmark", "cpu_model", "python_version"):
        assert key in env
    assert env["cpu_flags"] == [f for f in CPU_FLAGS_OF_INTEREST if f in _proc_flags()]
    assert env["tf32_in_effect"] is False  # whatever cuDNN's switch says, a CPU has no TF32


@pytest.mark.parametrize(
    "device_type, capability, conv_switch, expected",
    [
        ("cpu", None, True, False),  # fp32-default on a CPU: the switch is PyTorch's default, the arithmetic fp32
        ("cuda", "7.0", True, False),  # V100: no TF32 units
        ("cuda", "8.0", True, True),
        ("cuda", "9.0", False, False),  # strict fp32 on an H100/H200
        ("cuda", "12.0", True, True),
    ],
)
def test_tf32_in_effect_needs_the_switch_and_a_gpu_that_has_tf32(device_type, capability, conv_switch, expected):
    env = {"device_type": device_type, "compute_capability": capability, "cudnn_allow_tf32": conv_switch}
    assert environment.tf32_in_effect(env) is expected


def test_hardware_report_on_this_cpu_follows_its_flags():
    report = hardware_report(torch.device("cpu"))
    flags = _proc_flags()
    assert report.device_type == "cpu" and not report.tensor_cores and not report.native_bf16
    assert report.cpu_amx == ({"amx_tile", "amx_bf16"} <= flags)
    assert report.cpu_bf16 == bool(flags & {"avx512_bf16", "amx_bf16"})
    assert report.recommended_amp in ("amp-bf16", "fp32")
    assert report.expected_gain.endswith(".") and ". " not in report.expected_gain  # one sentence
    assert any("tf32" in note for note in report.notes)


@pytest.mark.parametrize(
    "flags, recommended, phrase",
    [
        (["avx512f", "avx512_bf16", "amx_tile", "amx_bf16"], "amp-bf16", "AMX"),
        (["avx512f", "avx512_bf16"], "amp-bf16", "no AMX"),
        (["avx512f"], "fp32", "no bf16 hardware"),
    ],
)
def test_cpu_recommendation_per_feature_set(monkeypatch, flags, recommended, phrase):
    monkeypatch.setattr(environment, "cpu_flags", lambda: flags)
    report = hardware_report(torch.device("cpu"))
    assert report.recommended_amp == recommended
    assert phrase in report.expected_gain
    assert report.cpu_amx == ("amx_bf16" in flags)


def test_default_device_is_the_gpu_when_there_is_one():
    assert hardware_report().device_type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize(
    "flags, fast_fp16",
    [(["avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_fp16"], True),
     (["avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"], False), ([], False)],
)
def test_the_cpu_fp16_note_is_said_of_this_cpu_from_its_amx_fp16_flag(monkeypatch, flags, fast_fp16):
    monkeypatch.setattr(environment, "cpu_flags", lambda: flags)
    report = hardware_report(torch.device("cpu"))
    fp16_notes = [note for note in report.notes if "fp16" in note]
    assert len(fp16_notes) == 1 and fp16_notes[0].startswith("This CPU has")
    assert ("tens of times slower" in fp16_notes[0] + report.expected_gain) is not fast_fp16
    # The Run page's amp-fp16 warning reads the same sentence from the report, also after a round trip as JSON.
    assert report.cpu_amx_fp16 is fast_fp16
    assert HardwareReport.from_dict(report.to_dict()).cpu_fp16_note == fp16_notes[0]
