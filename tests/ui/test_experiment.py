"""The Run page's wording that depends on this server: which fp32 is the lab's on this device."""

from trainer.environment import HardwareReport
from ui.experiment import tf32_note


def report(device_type="cpu", capability=None, native_bf16=False, recommended="amp-bf16") -> HardwareReport:
    return HardwareReport(
        device_name="test device", device_type=device_type, tensor_cores=device_type == "cuda",
        native_bf16=native_bf16, cpu_bf16=True, cpu_amx=True, cpu_fp16=False, recommended_amp=recommended,
        expected_gain="", compute_capability=capability,
    )


CPU = report()
AMPERE = report("cuda", "8.0", native_bf16=True)
VOLTA = report("cuda", "7.0", recommended="amp-fp16")


def test_the_tf32_note_says_which_fp32_is_the_labs_where_tf32_exists():
    ampere = tf32_note(AMPERE)
    assert ampere.startswith("**fp32 in this app is strict fp32**: TF32 off")
    assert "its fp32 convolutions run in TF32" in ampere and "**fp32-default** (fp32 as PyTorch defaults) is the lab's " \
        "baseline" in ampere
    assert tf32_note(CPU) == ("On a CPU there is no TF32, so this app's fp32 and fp32 as PyTorch defaults (the lab's "
                              "baseline) are the same arithmetic here.")
    assert tf32_note(VOLTA).startswith("On this GPU (compute capability 7.0) there is no TF32, so")
