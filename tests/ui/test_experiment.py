"""The experiment page's logic: what this hardware and these limits offer, and the job the Run button submits."""

import pytest

from server.records import MAX_COMPARE_PAIRS, MAX_LABEL_CHARS
from server.settings import Settings
from trainer.environment import HardwareReport
from ui.experiment import (
    BATCH_SIZES,
    COMPARED_MODES,
    amp_modes,
    blocking_reasons,
    comparison_spec,
    experiment_choices,
    log_every,
    quick_demo_spec,
    tf32_note,
)


def report(device_type="cpu", capability=None, native_bf16=False, recommended="amp-bf16") -> HardwareReport:
    return HardwareReport(
        device_name="test device", device_type=device_type, tensor_cores=device_type == "cuda",
        native_bf16=native_bf16, cpu_bf16=True, cpu_amx=True, cpu_fp16=False, recommended_amp=recommended,
        expected_gain="", compute_capability=capability,
    )


CPU = report()
AMPERE = report("cuda", "8.0", native_bf16=True)
VOLTA = report("cuda", "7.0", recommended="amp-fp16")


def values(**changes) -> dict:
    base = dict(epochs=5, batch_size=256, amp="amp-bf16", data="synthetic", loader="dataloader", width=1,
                channels_last=False, breakdown=False, subset=None)
    return {**base, **changes}


def test_modes_offered_depend_on_the_hardware():
    assert amp_modes(CPU)[0] == ("amp-fp16", "amp-bf16")
    assert "tf32" in amp_modes(CPU)[1]
    assert amp_modes(AMPERE) == (("amp-fp16", "amp-bf16", "tf32", "fp32-default"), {})
    offered, missing = amp_modes(VOLTA)
    assert offered == ("amp-fp16",)
    assert set(missing) == {"amp-bf16", "tf32", "fp32-default"} and "7.0" in missing["tf32"]


def test_fp32_default_is_offered_only_where_it_differs_from_fp32():
    offered, missing = amp_modes(CPU)
    assert "fp32-default" not in offered and "computes exactly as fp32 on a CPU" in missing["fp32-default"]
    assert "fp32-default" in amp_modes(AMPERE)[0]
    spec = comparison_spec(values(amp="fp32-default"))
    assert [run.precision for run in spec.runs] == ["fp32", "fp32-default"]
    spec.validate()


def test_the_tf32_note_says_which_fp32_is_the_labs_where_tf32_exists():
    ampere = tf32_note(AMPERE)
    assert ampere.startswith("**fp32 in this app is strict fp32**: TF32 off")
    assert "its fp32 convolutions run in TF32" in ampere and "**fp32-default** (fp32 as PyTorch defaults) is the lab's " \
        "baseline" in ampere
    assert tf32_note(CPU) == ("On a CPU there is no TF32, so this app's fp32 and fp32 as PyTorch defaults (the lab's "
                              "baseline) are the same arithmetic here.")
    assert tf32_note(VOLTA).startswith("On this GPU (compute capability 7.0) there is no TF32, so")


def test_choices_follow_the_instructors_limits():
    settings = Settings(max_epochs=3, max_batch_size=1000, max_subset=5000)
    choices = experiment_choices(settings, CPU, cifar10_ok=False)
    assert choices["epochs"].allowed == (1, 2, 3) and choices["epochs"].default == 3
    assert choices["batch_size"].allowed == BATCH_SIZES[:5] and choices["batch_size"].default == 256
    assert choices["subset"].allowed == (256, 512, 1024, 2048, 5000) and choices["subset"].default == 5000
    assert choices["data"].allowed == ("synthetic",)


@pytest.mark.parametrize(
    "limits",
    [{"max_epochs": 1}, {"max_batch_size": 1}, {"max_batch_size": 16}, {"max_batch_size": 100}, {"max_subset": 1},
     {"max_subset": 300}, {"max_epochs": 1, "max_batch_size": 16, "max_subset": 100}],
    ids=lambda limits: ",".join(f"{k}={v}" for k, v in limits.items()),
)
def test_every_choice_offered_under_any_limit_is_accepted_by_the_server(limits):
    settings = Settings(**limits)
    choices = experiment_choices(settings, CPU, cifar10_ok=False)
    defaults = {param: choice.default for param, choice in choices.items()}
    for param in ("epochs", "batch_size", "subset"):
        for allowed in choices[param].allowed:
            for run in comparison_spec({**defaults, param: allowed}).runs:
                settings.check(run)  # raises ConfigError if the page offered what the server refuses


def test_default_choices_are_the_labs_settings():
    choices = experiment_choices(Settings(), AMPERE, cifar10_ok=True)
    assert choices["epochs"].allowed == tuple(range(1, 21)) and choices["epochs"].default == 5
    assert choices["batch_size"].allowed[0] == 32 and choices["batch_size"].allowed[-1] == 4096
    assert choices["batch_size"].default == 256
    assert choices["data"].default == "cifar10" and choices["loader"].default == "dataloader"
    assert choices["subset"].default is None
    assert choices["amp"].default == "amp-bf16"


def test_fp16_on_a_cpu_is_blocked_without_a_small_subset():
    assert blocking_reasons(values(amp="amp-fp16"), CPU)
    assert not blocking_reasons(values(amp="amp-fp16", subset=2048), CPU)
    assert not blocking_reasons(values(amp="amp-fp16"), AMPERE)


def test_the_run_button_submits_fp32_then_the_chosen_mode_with_equal_settings():
    spec = comparison_spec(values(amp="amp-bf16", subset=2048, batch_size=128, epochs=2, loader="resident"))
    assert spec.kind == "compare"
    fp32, amp = spec.runs
    assert (fp32.precision, amp.precision) == ("fp32", "amp-bf16")
    fp32_rest = {k: v for k, v in fp32.to_dict().items() if k != "precision"}
    assert fp32_rest == {k: v for k, v in amp.to_dict().items() if k != "precision"}
    assert fp32.test_subset == 1000 and fp32.subset == 2048
    assert spec.label.startswith("fp32 vs amp-bf16, 2 epochs, batch 128")
    spec.validate()


def test_log_every_gives_about_a_hundred_loss_points_but_never_fewer_than_the_lab():
    assert log_every(None, 256, 5) == 10
    assert log_every(256, 64, 1) == 1
    assert log_every(None, 32, 20) == 100


def test_quick_demo_is_small_and_uses_the_recommended_mode():
    spec = quick_demo_spec(CPU, Settings())
    assert [run.precision for run in spec.runs] == ["fp32", "amp-bf16"]
    assert all(run.epochs == 1 and run.data == "synthetic" and run.subset <= 5000 for run in spec.runs)
    assert quick_demo_spec(VOLTA, Settings()).runs[1].precision == "amp-fp16"
    assert spec.label.startswith("quick demo")


def test_the_quick_demo_stays_within_a_strict_servers_limits():
    strict = Settings(max_batch_size=16, max_subset=300, max_epochs=1)
    spec = quick_demo_spec(CPU, strict)
    for run in spec.runs:
        strict.check(run)  # raises if the server would refuse it
    assert (spec.runs[0].batch_size, spec.runs[0].subset) == (16, 300)


def test_repeats_alternate_the_pair_and_name_the_job():
    choices = experiment_choices(Settings(), CPU, cifar10_ok=False)
    assert choices["repeats"].allowed == tuple(range(1, MAX_COMPARE_PAIRS + 1)) and choices["repeats"].default == 1
    one = comparison_spec(values(repeats=1))
    three = comparison_spec(values(repeats=3, subset=2048))
    assert [run.precision for run in three.runs] == ["fp32", "amp-bf16"] * 3
    assert three.runs[2:4] == three.runs[:2] and three.runs[0] is not three.runs[2]  # equal settings, own objects
    assert three.label.startswith("fp32 vs amp-bf16 x3, 5 epochs") and "x3" not in one.label
    assert len(comparison_spec(values()).runs) == 2  # no repeats given (the quick demo): one pair
    three.validate()
    longest = values(amp=max(COMPARED_MODES, key=len), epochs=20, batch_size=4096, channels_last=True,
                     repeats=MAX_COMPARE_PAIRS)
    assert len(comparison_spec(longest).label) <= MAX_LABEL_CHARS
