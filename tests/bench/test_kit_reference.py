"""The GPU kit's reference results (issue 22, item 14): the command that runs the same pair, and what it refuses."""

import shlex
from dataclasses import replace

import pytest

from bench.kit_reference import compare_command, file_name
from trainer.cli import build_parser
from trainer.config import RunConfig

# Step 3's sweep point on an H200, as the kit's full plan sets it.
LAB_POINT = RunConfig(precision="fp32", epochs=5, batch_size=1024, data="synthetic", loader="resident",
                      device="cuda", num_workers=4, min_steady_s=3.0, data_root="/tmp/gpu-check-x/synthetic")


def test_the_command_runs_the_same_pair_with_the_same_settings():
    command = compare_command(LAB_POINT, replace(LAB_POINT, precision="amp-bf16"), "reference/x.json")
    args = build_parser().parse_args(shlex.split(command)[3:])  # after "python -m trainer"
    assert (args.command, args.amp, args.json) == ("compare", "amp-bf16", "reference/x.json")
    assert (args.epochs, args.batch_size, args.loader, args.device) == (5, 1024, "resident", "cuda")
    assert (args.workers, args.min_steady_s, args.subset) == (4, 3.0, None)
    assert "--data-root" not in command  # a prepared copy of the synthetic split: the same pixels as generating


def test_a_job_managers_peaks_cache_is_no_setting_of_the_comparison():
    config = replace(LAB_POINT, peaks_cache="/srv/amp-lab/state/device-peaks.json")
    assert "peaks" not in compare_command(config, replace(config, precision="amp-fp16"), "reference/x.json")


def test_two_runs_that_differ_beyond_their_precision_are_no_comparison():
    with pytest.raises(ValueError, match="batch_size differ"):
        compare_command(LAB_POINT, replace(LAB_POINT, precision="amp-bf16", batch_size=256), "reference/x.json")


def test_a_setting_the_command_line_cannot_say_is_refused_rather_than_left_out():
    config = replace(LAB_POINT, loss_shrink_log2=8)
    with pytest.raises(ValueError, match="loss_shrink_log2=8 has no option"):
        compare_command(config, replace(config, precision="amp-bf16"), "reference/x.json")


def test_files_are_named_as_reference_names_them():
    assert file_name("cuda", "2026-12-05", "sweep-batch1024") == "cuda-2026-12-05-sweep-batch1024.json"


def test_a_profiled_pair_that_measured_the_peaks_keeps_both_in_its_command():
    config = replace(LAB_POINT, profile_steps=20, measure_peaks=True, peaks_cache="/tmp/kit/device-peaks.json")
    command = compare_command(config, replace(config, precision="amp-fp16"), "reference/x.json")
    args = build_parser().parse_args(shlex.split(command)[3:])
    assert (args.profile_steps, args.measure_peaks, args.peaks_cache) == (20, True, None)
