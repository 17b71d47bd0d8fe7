"""The lab's results table, built once for the command line and the app."""

import pytest

from tests.ui_fixtures import lab_pair, make_result
from trainer.comparison_table import comparison_table, format_bytes, lab_reference_table
from trainer.results import MEMORY_LABELS


def by_metric(built):
    return {row[0]: list(row[1:]) for row in built.rows}


def test_the_labs_table_is_computed_from_two_runs():
    built = comparison_table(*lab_pair())
    assert built.columns == ("Metric", "FP32", "AMP fp16 + GradScaler", "Improvement")  # each mode by its name
    rows = by_metric(built)
    assert rows["Training time (2 epochs)"] == ["75.0 s", "48.0 s", "1.56x faster (36% less time)"]
    assert rows["Peak memory: PyTorch allocated"] == ["1.80 GB", "1.10 GB", "39% less"]
    assert rows["Test accuracy"] == ["50.0%", "51.0%", "+1.0 points"]
    assert rows["Throughput (images/s after 5 warm-up steps)"][2] == "1.56x"
    assert rows["Steps skipped by the loss scaler"] == ["0", "0", ""]
    assert f"PyTorch allocated: {MEMORY_LABELS['torch_max_allocated']}" in built.notes


def test_columns_name_the_precisions_outside_the_usual_pair():
    built = comparison_table(make_result("fp32", 10.0), make_result("fp32", 12.0))
    assert built.columns == ("Metric", "FP32 (first)", "FP32 (second)", "Improvement")
    assert built.rows[0][3] == "1.20x slower (20% more time)"
    assert "Steps skipped by the loss scaler" not in by_metric(built)


def test_the_two_fp32_modes_are_told_apart():
    built = comparison_table(make_result("fp32", 10.0), make_result("fp32-default", 8.0))
    assert built.columns == ("Metric", "FP32", "FP32 (PyTorch defaults)", "Improvement")


def test_a_change_that_rounds_to_nothing_claims_no_direction():
    from trainer.comparison_table import _points, memory_change, speed_change

    assert speed_change(10.0, 9.96) == speed_change(10.0, 10.049) == "about the same time (1.00x)"
    assert speed_change(10.0, 9.9) == "1.01x faster (1% less time)"
    assert memory_change(100.0, 100.3) == "about the same" and memory_change(100.0, 61.0) == "39% less"
    assert _points(-0.0004) == "+0.0 points" and _points(-0.012) == "-1.2 points"


def test_the_headline_pair_is_named_in_plain_words():
    from trainer.results import SpeedupInterval

    assert SpeedupInterval(1.2, 1.2, 1.5, 2).describe().startswith("1.20x, the lower of 2 alternating pairs")
    assert SpeedupInterval(1.3, 1.2, 1.5, 3).describe().startswith("1.30x, the middle of 3 alternating pairs")
    assert SpeedupInterval(1.3, 1.2, 1.5, 4).middle_words == "the lower of the middle two of 4"


def test_text_and_records_carry_the_same_cells():
    built = comparison_table(*lab_pair())
    lines = built.as_text().splitlines()
    assert [cell.strip() for cell in lines[0].split(" | ")] == list(built.columns)
    assert set(lines[1]) <= {"-", "+"}
    assert [cell.strip() for cell in lines[2].split(" | ")] == list(built.rows[0])
    assert built.records()[0] == dict(zip(built.columns, built.rows[0]))
    assert lines[-len(built.notes):] == built.notes


def test_warnings_of_either_run_become_notes():
    baseline, candidate = lab_pair()
    candidate.warnings = ["the run was short"]
    assert "warning (amp-fp16): the run was short" in comparison_table(baseline, candidate).notes


def test_lab_reference_says_how_many_times_as_fast():
    rows = by_metric(lab_reference_table())
    assert rows["Training time (5 epochs)"] == ["~75 s", "~48 s", "~1.56x faster (36% less time)"]
    assert rows["Peak GPU memory"] == ["~1.8 GB", "~1.1 GB", "~39% less"]


@pytest.mark.parametrize("count, text", [(1_800_000_000, "1.80 GB"), (95_000_000, "95 MB"), (2_500, "2 kB")])
def test_format_bytes_uses_decimal_units_like_the_lab(count, text):
    assert format_bytes(count) == text


def test_the_table_shows_the_speedup_interval_or_says_it_is_unknown():
    from trainer.results import SpeedupInterval

    built = comparison_table(*lab_pair(), SpeedupInterval(1.56, 1.4, 1.7, 3))
    assert by_metric(built)["Speedup over 3 alternating pairs"][2] == "1.56x, the middle of 3 (range 1.40x to 1.70x)"
    single = comparison_table(*lab_pair(), SpeedupInterval(1.56, None, None, 1))
    assert any("spread is unknown" in note for note in single.notes)


def test_the_table_shows_each_runs_timing_quality_and_the_reasons_of_a_noisy_one():
    noisy = {"verdict": "noisy", "cv": 0.31, "reasons": ["other processes used 48% of the 2 CPU cores"]}
    baseline = make_result("fp32", 75.0, timing_quality=noisy)
    candidate = make_result("amp-bf16", 48.0, timing_quality={"verdict": "steady", "cv": 0.02, "reasons": []})
    built = comparison_table(baseline, candidate)
    assert by_metric(built)["Timing quality"] == ["noisy (spread 31%)", "steady (spread 2%)", ""]
    assert "timing (fp32): noisy: other processes used 48% of the 2 CPU cores" in built.notes


def test_each_column_names_its_exact_mode_and_a_comparison_says_how_it_differs_from_the_labs():
    from trainer.comparison_table import lab_differences, mode_name

    baseline, candidate = make_result("fp32-default", 75.0), make_result("amp-fp16", 48.0)
    assert mode_name(baseline) == "FP32 (PyTorch defaults)"  # a CPU: no TF32
    baseline.environment.update(device_type="cuda", tf32_in_effect=True, tf32_capable=True)
    assert mode_name(baseline) == "FP32 (PyTorch defaults: TF32 convs)"
    strict = make_result("fp32", 75.0, environment={"device_type": "cuda", "tf32_capable": True})
    assert (mode_name(strict), mode_name(make_result("fp32"))) == ("FP32 (TF32 off)", "FP32")
    assert (mode_name(candidate), mode_name(make_result("amp-bf16"))) == ("AMP fp16 + GradScaler", "AMP bf16")
    always = ["this server's Test CPU (the lab's: a Tensor Core GPU it does not name)",
              "fixed seeds for the weights and the shuffle, and an accuracy check after the timed training (the lab's: "
              "neither)"]
    assert lab_differences(baseline, candidate) == [
        "epochs 2 (the lab's: 5)", "data synthetic (the lab's: CIFAR-10)",
        "the loader: this app's DataLoader: workers kept between epochs, pinned memory, copies that overlap the step, "
        "no loss.item() every step (the lab's: the lab's harness)",
        "subset 4,096 images (the lab's: all 50,000 images)", *always]
    as_the_lab = {"epochs": 5, "data": "cifar10", "subset": None, "loader": "lab"}
    lab = make_result("fp32-default", config=as_the_lab, environment={"device_type": "cpu", "loader_workers": 3,
                                                                     "host_malloc": "tuned: glibc ..."})
    assert lab_differences(lab, make_result("amp-fp16", config=as_the_lab)) == [
        "3 DataLoader workers (the lab's: 4 DataLoader workers)",
        "glibc's malloc tuned to reuse freed memory (the lab's: its defaults)",
        "this server's device (the lab's: a Tensor Core GPU it does not name)", always[1]]  # the name unrecorded
