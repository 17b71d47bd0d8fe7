"""The step budget: FLOPs counted by torch agree with a count from the shapes, and a run's step is set against its
device's peaks in the arithmetic each layer ran in."""

from dataclasses import replace

import pytest

from lessons.roofline import layer_costs, place
from lessons.step_budget import (
    PUBLISHED_PEAKS,
    budget_rows,
    budget_sentence,
    lab_step_on,
    published_note,
    published_peaks,
    published_variant,
    run_budget,
    shape_flops,
)
from tests.ui_fixtures import lab_pair
from trainer.model import step_flops
from trainer.peaks import DevicePeaks
from trainer.precision import matmul_dtype

CPU_PEAKS = DevicePeaks("CPU: test", "2.14.1", matmul_tflops={"fp32": 0.2, "bf16": 0.4, "fp16": 0.01},
                        copy_gb_per_s=20.0, launch_us=3.0)


@pytest.mark.parametrize("width, batch_size", [(1, 256), (1, 7), (2, 64), (4, 32)])
def test_torchs_flop_count_matches_the_count_from_the_layer_shapes(width, batch_size):
    counted = sum(step_flops(width, batch_size).values())
    assert counted == shape_flops(width, batch_size)  # exactly: within 1% is what the issue asks


def test_the_labs_step_is_11_4_gflop_and_an_h200_needs_microseconds_for_it():
    lab = lab_step_on("H200 SXM")
    assert lab.conv_flops + lab.linear_flops == pytest.approx(11.38e9, rel=1e-3)
    assert lab.step_s == pytest.approx(75 / 980)
    assert lab.arithmetic_s["TF32"] == pytest.approx(23e-6, rel=0.01)
    assert lab.arithmetic_s["AMP"] == pytest.approx(11.5e-6, rel=0.01)


def test_the_labs_step_at_its_own_fp32_is_64_7_us_of_arithmetic_and_amp_allows_1_93x_at_best():
    """Issue 32: fp32 as the lab ran it (TF32 convolutions, strict fp32 linear layers), recomputed from the shapes."""
    c1, c2, hidden, b = 32, 64, 512, 256
    conv = 2 * (2 * b * 32 * 32 * c1 * 3 * 9) + 3 * (2 * b * 16 * 16 * c2 * c1 * 9)  # conv1 needs no input gradient
    linear = 3 * (2 * b * c2 * 8 * 8 * hidden) + 3 * (2 * b * hidden * 10)
    h200 = PUBLISHED_PEAKS["H200 SXM"]
    assert conv / (h200["tf32"] * 1e12) == pytest.approx(16.5e-6, abs=0.05e-6)
    assert linear / (h200["fp32"] * 1e12) == pytest.approx(48.2e-6, abs=0.05e-6)
    lab = lab_step_on("H200 SXM")
    assert (lab.conv_flops, lab.linear_flops) == (conv, linear)
    assert lab.arithmetic_s["fp32 as the lab ran it"] == pytest.approx(64.7e-6, abs=0.05e-6)
    assert lab.roofline_s["fp32 as the lab ran it"] == pytest.approx(177e-6, abs=0.5e-6)
    assert lab.roofline_s["fp32 as the lab ran it"] / lab.roofline_s["AMP"] == pytest.approx(1.93, abs=0.005)
    # What that leaves of the lab's 76.5 ms step: AMP can save under 0.1 ms of it.
    assert lab.saved_at_most_s < 0.1e-3 and lab.speedup_at_most < 1.002
    paragraph = lab.paragraph()
    assert "**64.7 µs**" in paragraph and "a speedup of at most **1.001x**" in paragraph
    assert "the lab's 1.56x is not explained by this model" in paragraph and "exactly" not in paragraph


def test_published_peaks_are_the_exact_variants_and_a_variant_without_figures_says_so():
    assert published_variant("NVIDIA H200") == "H200 SXM" and published_variant("NVIDIA H200 NVL") == "H200 NVL"
    assert published_variant("NVIDIA H100 80GB HBM3") == "H100 SXM"
    assert published_variant("NVIDIA H100 PCIe") == "H100 PCIe" and published_variant("NVIDIA H100 NVL") == "H100 NVL"
    assert published_variant("NVIDIA A100-SXM4-80GB") == "A100 SXM 80 GB"
    assert published_variant("NVIDIA A100 80GB PCIe") == "A100 PCIe 80 GB"
    assert published_variant("NVIDIA A100-PCIE-40GB") == published_variant("NVIDIA A100-SXM4-40GB") == "A100 40 GB"
    assert published_variant("NVIDIA L4") == "L4" and published_peaks("NVIDIA L40S") is None
    assert published_peaks("NVIDIA H100 PCIe")["gb_per_s"] < published_peaks("NVIDIA H100 80GB HBM3")["gb_per_s"]
    assert published_peaks("CPU: AMD EPYC") is None and published_note("CPU: AMD EPYC") is None
    assert published_variant("NVIDIA H100 80GB HBM3 MIG 1g.10gb") is None
    assert "MIG slice" in published_note("NVIDIA H100 80GB HBM3 MIG 1g.10gb")
    assert published_note("NVIDIA GH200 480GB") == ("this app has no published peaks for the NVIDIA GH200 480GB: only "
                                                    "its measured ones are used")
    assert published_note("NVIDIA H200") is None


def test_each_mode_runs_its_convolutions_and_linear_layers_in_its_own_arithmetic():
    assert matmul_dtype("amp-bf16", True, False) == matmul_dtype("amp-bf16", False, True) == "bf16"
    assert matmul_dtype("amp-fp16", False, False) == "fp16"
    assert matmul_dtype("fp32-default", True, True) == "tf32"  # cuDNN's TF32 on: the lab's convolutions
    assert matmul_dtype("fp32-default", False, True) == "fp32"  # its linear layers stay strict fp32
    assert matmul_dtype("fp32", True, True) == "fp32" and matmul_dtype("tf32", False, False) == "tf32"


def test_a_runs_budget_sets_its_flops_and_bytes_at_the_measured_rates_against_its_measured_step():
    baseline, candidate = lab_pair("amp-bf16")  # batch 256, 8192 images over 75 s and 48 s
    fp32 = run_budget("FP32", baseline, CPU_PEAKS)
    bf16 = run_budget("AMP (bf16)", candidate, CPU_PEAKS)
    flops = shape_flops(1, 256)
    assert fp32.flops == bf16.flops == flops
    assert bf16.bytes < fp32.bytes  # 16-bit activations
    assert fp32.step_s == pytest.approx(256 / baseline.steady_images_per_s)
    assert fp32.arithmetic_s == pytest.approx(flops / 0.2e12) and bf16.arithmetic_s == pytest.approx(flops / 0.4e12)
    assert fp32.bytes_s == pytest.approx(fp32.bytes / 20e9)
    assert max(fp32.arithmetic_s, fp32.bytes_s) <= fp32.roofline_s <= fp32.arithmetic_s + fp32.bytes_s
    assert fp32.published_s is None  # a CPU: no published peak
    sentence = budget_sentence([fp32, bf16])
    assert sentence.startswith("At this device's measured best rates, FP32: the arithmetic needs "
                               f"{flops / 0.2e12 * 1e3:.1f} ms and the bytes")
    assert "why AMP's speedup here cannot approach the ratio of the peak rates" in sentence
    assert [row["Run"] for row in budget_rows([fp32, bf16])] == ["FP32", "AMP (bf16)"]
    assert run_budget("x", replace(baseline, steady_images_per_s=None), CPU_PEAKS) is None


def test_a_gpu_run_is_also_set_against_its_published_peaks():
    baseline, _ = lab_pair("amp-fp16")
    on_gpu = replace(baseline, environment={"device_type": "cuda", "device_name": "NVIDIA H200",
                                            "cudnn_allow_tf32": True}, config=replace(baseline.config,
                                                                                      precision="fp32-default"))
    gpu_peaks = replace(CPU_PEAKS, matmul_tflops={"fp32": 50.0, "tf32": 300.0, "bf16": 600.0, "fp16": 600.0},
                        copy_gb_per_s=4000.0)
    budget = run_budget("FP32 (defaults)", on_gpu, gpu_peaks)
    by_op = step_flops(1, 256)
    convs = by_op["aten.convolution"] + by_op["aten.convolution_backward"]
    linear = by_op["aten.addmm"] + by_op["aten.mm"]
    assert budget.arithmetic_s == pytest.approx(convs / 300e12 + linear / 50e12)  # TF32 convs, fp32 linear layers
    published = place(layer_costs(1, 256, sixteen_bit=False), {"conv": 494.7, "linear": 67.0}, 4800.0)
    assert budget.published_s == pytest.approx(sum(point.bound_s for point in published))
    assert "Roofline at the published peaks" in budget_rows([budget])[0]


def test_a_profile_is_set_beside_the_runs_steady_step_and_a_gap_over_a_fifth_is_flagged():
    from dataclasses import replace

    from lessons.step_budget import profile_beside_steady
    from trainer.config import RunConfig
    from trainer.results import RunResult

    run = RunResult(RunConfig(batch_size=100), {}, 1.0, [1.0], 1000.0, {}, [], None)  # a steady step of 100 ms
    assert profile_beside_steady(run) is None  # not profiled
    close = replace(run, profile={"step_s": 0.110})
    assert profile_beside_steady(close) == ("The profiled window's step took 110.0 ms, the run's steady step "
                                            "100.0 ms (+10%): the profile describes the step the run timed.")
    far = profile_beside_steady(replace(run, profile={"step_s": 0.125}))
    assert "(+25%): more than 20% apart, so the profile may not describe the timed steps" in far
    assert "(-30%): more than 20% apart" in profile_beside_steady(replace(run, profile={"step_s": 0.070}))


def test_a_budget_never_prints_a_lower_bound_above_its_step_it_says_the_peaks_are_too_low():
    """Issue 32: a cached 512-matmul "peak" once told an 86.7 ms step it needed at least 352 ms (406% of it)."""
    baseline, candidate = lab_pair("amp-bf16")
    # The AMP step took 1.5 s for 11.4 GFLOP: 7.6 GFLOP/s at least. A bf16 "peak" of 5 GFLOP/s is below that.
    slow_peaks = replace(CPU_PEAKS, matmul_tflops={"fp32": 0.2, "bf16": 0.005, "fp16": 0.01})
    fine, low = run_budget("FP32", baseline, slow_peaks), run_budget("AMP (bf16)", candidate, slow_peaks)
    assert not fine.peaks_too_low and low.peaks_too_low and low.roofline_s > low.step_s
    sentence = budget_sentence([fine, low])
    assert sentence.startswith("This device's peak measurement is too low to judge these steps: AMP (bf16) took ")
    assert "measures them again before its next job" in sentence and "%" not in sentence
    rows = budget_rows([fine, low])
    assert rows[1]["Roofline (layer by layer)"] == "above the step: peaks too low"
    assert rows[0]["Roofline (layer by layer)"].endswith("%)")


def test_the_peaks_say_when_and_under_what_load_and_a_beaten_peak_is_found_by_the_budgets_own_test():
    from lessons.step_budget import peaks_beaten, peaks_provenance

    peaks = replace(CPU_PEAKS, measured_at=1796515200.0, matmul_sides={"fp32": 4096, "bf16": 2048},
                    load={"cores": 2, "load_avg_1min": 0.4, "other_cpu_share": 0.03})
    said = peaks_provenance(peaks, "CPU: test")
    assert "Measured peaks on CPU: test (torch 2.14.1), 2026-12-06 00:00 UTC, other processes using 3% of the 2 CPU " \
           "cores (load average 0.4)" in said
    assert "fp32 0.2 (at 4096)" in said and "launched back to back" in said
    assert "This app has no published peaks for the NVIDIA GH200 480GB" in peaks_provenance(peaks, "NVIDIA GH200 480GB")
    baseline, candidate = lab_pair("amp-bf16")
    assert not peaks_beaten(baseline)  # no peaks recorded
    assert not peaks_beaten(replace(candidate, device_peaks=CPU_PEAKS.to_dict()))
    low = replace(CPU_PEAKS, matmul_tflops={"fp32": 0.2, "bf16": 0.005, "fp16": 0.01})
    assert peaks_beaten(replace(candidate, device_peaks=low.to_dict()))
