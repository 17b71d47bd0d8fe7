"""The sentence that explains a comparison follows the numbers."""

from lessons.interpret import interpret
from lessons.verdicts import differences, doubt
from tests.ui_fixtures import lab_pair, make_result


def test_a_clear_speedup_is_stated_with_time_and_memory_saved():
    sentence = interpret(*lab_pair("amp-bf16"))
    assert sentence.startswith("amp-bf16 trained 1.56x as fast as fp32 (36% less time)")
    assert sentence.endswith(", and its peak memory (PyTorch allocated) was 39% lower.")


def test_the_sentence_quotes_one_fixed_memory_figure_not_the_one_that_shrank_most():
    # PyTorch's peak fell 10%; the process's RSS growth, a much smaller figure, fell 95%: the sentence quotes the
    # former, as the lab's claim is about what training needs (the table shows both).
    baseline = make_result("fp32", 10.0, peak_memory={"torch_max_allocated": 1_000_000_000,
                                                      "process_rss_growth": 2_000_000})
    candidate = make_result("amp-fp16", 6.0, peak_memory={"torch_max_allocated": 900_000_000,
                                                          "process_rss_growth": 100_000},
                            environment={"device_type": "cuda", "device_name": "GPU"})
    assert interpret(baseline, candidate).endswith("its peak memory (PyTorch allocated) was 10% lower.")
    candidate.peak_memory["torch_max_allocated"] = 1_200_000_000
    assert interpret(baseline, candidate).endswith(", but its peak memory (PyTorch allocated) was 20% higher.")


def test_a_data_bound_run_points_to_the_resident_loader():
    baseline = make_result("fp32", 60.0, data_wait_s=40.0, compute_s=20.0)
    candidate = make_result("amp-bf16", 58.0, data_wait_s=45.0, compute_s=13.0)
    sentence = interpret(baseline, candidate)
    assert sentence.startswith("The data loader bounds this run: 78%")
    assert "try the resident loader" in sentence


def test_little_gain_with_the_lab_dataloader_suggests_measuring_the_wait():
    baseline = make_result("fp32", 60.0, config={"loader": "dataloader"})
    candidate = make_result("amp-bf16", 59.0, config={"loader": "dataloader"})
    sentence = interpret(baseline, candidate)
    assert sentence.startswith("amp-bf16 makes little difference here (1.02x), probably because the lab's DataLoader "
                               "may be the bottleneck")


def test_little_gain_on_a_small_model_blames_the_arithmetic_per_step():
    baseline = make_result("fp32", 60.0, config={"loader": "resident"})
    candidate = make_result("amp-bf16", 59.0, config={"loader": "resident"})
    assert "too little arithmetic" in interpret(baseline, candidate)


def test_fp16_on_a_cpu_is_explained_and_bf16_recommended():
    sentence = interpret(make_result("fp32", 10.0), make_result("amp-fp16", 400.0))
    assert sentence.startswith("amp-fp16 took 40.00x the fp32 time here, most likely because PyTorch has no fast fp16 "
                               "kernels for this CPU")
    assert "use amp-bf16" in sentence


def test_fp16_on_a_cpu_that_was_not_slower_is_not_blamed_on_slow_kernels():
    # An AMX-FP16 CPU, say: 10 s -> 8 s is a speedup, stated as one.
    sentence = interpret(make_result("fp32", 10.0), make_result("amp-fp16", 8.0))
    assert sentence.startswith("amp-fp16 trained 1.25x as fast as fp32") and "no fast fp16" not in sentence


def test_a_slower_amp_run_says_so():
    sentence = interpret(make_result("fp32", 10.0), make_result("amp-bf16", 13.0))
    assert sentence.startswith("amp-bf16 was slower here (1.30x the fp32 time)")


def test_runs_with_different_settings_are_not_compared_as_like_for_like():
    baseline = make_result("fp32", 10.0)
    candidate = make_result("amp-bf16", 5.0, config={"batch_size": 1024, "epochs": 3})
    assert differences(baseline, candidate) == ["epochs", "batch size"]
    assert interpret(baseline, candidate).startswith("These runs differ in more than precision (epochs, batch size)")


def test_a_run_timed_with_the_default_malloc_is_not_like_for_like_with_a_tuned_one():
    baseline = make_result("fp32", 10.0, config={"tune_host_malloc": False})
    candidate = make_result("amp-bf16", 5.0, config={"tune_host_malloc": True})
    assert differences(baseline, candidate) == ["host malloc"]


def test_a_very_short_run_is_called_too_short_to_time():
    baseline = make_result("fp32", 2.0, total_steps=4)
    candidate = make_result("amp-bf16", 3.0, total_steps=4)
    assert interpret(baseline, candidate).startswith("These runs are too short to time reliably (4 steps)")


def test_an_accuracy_drop_is_added_as_a_warning():
    baseline, candidate = lab_pair("amp-fp16")
    candidate.test_accuracy = 0.30
    assert interpret(baseline, candidate).endswith("Accuracy fell by 20.0 points: check the loss curves.")


def test_data_wait_share_needs_both_figures():
    assert make_result().data_wait_share is None
    assert make_result(data_wait_s=1.0, compute_s=3.0).data_wait_share == 0.25


NOISY = {"verdict": "noisy", "cv": 0.42, "intervals": 8, "other_cpu_share": 0.48, "reasons": [
    "other processes used 48% of the 2 CPU cores while this run was timed (load average 3.9 on 2 cores): "
    "competing load slowed it"]}
STEADY = {"verdict": "steady", "cv": 0.03, "intervals": 8, "other_cpu_share": 0.01, "reasons": []}


def test_a_noisy_run_makes_the_speedup_uncertain_and_says_why():
    baseline, candidate = lab_pair("amp-bf16")
    baseline.timing_quality, candidate.timing_quality = NOISY, STEADY
    sentence = interpret(baseline, candidate)
    assert sentence.startswith("The speedup is uncertain: the fp32 run's timing was noisy (other processes used 48%")
    assert "trained 1.56x as fast" not in sentence  # never stated as a fact


def test_an_interval_that_straddles_one_is_uncertain():
    from trainer.results import SpeedupInterval

    baseline, candidate = lab_pair("amp-bf16")
    sentence = interpret(baseline, candidate, SpeedupInterval(1.02, 0.91, 1.18, 3))
    assert sentence.startswith("The speedup is uncertain: over 3 alternating pairs the speedup ranged from 0.91x")
    # Steady runs whose pairs disagree: the spread between pairs is the reason, not the machine's load.
    assert sentence.endswith("The difference between the modes is smaller than the spread between pairs here, so the "
                             "1.02x cannot say which is faster; more pairs or longer runs can.")


def test_runs_too_short_or_unlike_are_uncertain_for_the_headline_too():
    baseline, candidate = lab_pair("amp-bf16")
    baseline.total_steps, candidate.total_steps = 40, 12
    assert doubt(baseline, candidate).reason == "the runs are too short to time reliably (12 steps, mostly warm-up)"
    assert "(12 steps)" in interpret(baseline, candidate)  # the shorter run's count, which the rule tests
    candidate.config.batch_size = 128
    assert doubt(baseline, candidate).reason == "the runs differ in more than precision (batch size)"


def test_a_steady_repeated_speedup_is_stated_with_its_range():
    from trainer.results import SpeedupInterval

    baseline, candidate = lab_pair("amp-bf16")
    baseline.timing_quality = candidate.timing_quality = STEADY
    sentence = interpret(baseline, candidate, SpeedupInterval(75 / 48, 1.4, 1.7, 3))
    assert sentence.startswith("amp-bf16 trained 1.56x as fast as fp32 (36% less time; 1.40x to 1.70x over 3")


def test_a_recorded_noisy_comparison_is_uncertain():
    """A real `compare` run on this project's CPU while other sessions' tests loaded it (tests/recorded/)."""
    import json
    from pathlib import Path

    from trainer.results import RunResult

    recorded = json.loads((Path(__file__).parents[1] / "recorded" / "noisy_compare_cpu.json").read_text())
    baseline, candidate = (RunResult.from_dict(run) for run in recorded["runs"])
    assert baseline.timing_quality["verdict"] == candidate.timing_quality["verdict"] == "noisy"
    sentence = interpret(baseline, candidate)
    # 10.6x slower on a CPU that emulates bf16: the hardware's cause comes first; the noise moves the figure only.
    assert sentence.startswith("amp-bf16 took 10.63x the fp32 time here because this CPU has no bf16 instructions")
    assert "the fp32 run's timing was noisy (other processes used" in sentence
    assert sentence.endswith("that changes the figure, not the direction.")
    assert "may be down to the machine's load" not in sentence


def test_a_noisy_run_outside_the_median_pair_still_makes_the_speedup_uncertain():
    from trainer.results import median_pair, speedup_interval, split_pairs

    runs = []
    for fp32_s in (75.0, 80.0, 70.0):  # speedups 1.56, 1.67, 1.46: the median pair is the first
        baseline, candidate = lab_pair("amp-bf16")
        baseline.total_time_s = fp32_s
        baseline.timing_quality = candidate.timing_quality = STEADY
        runs += [baseline, candidate]
    runs[3].timing_quality = NOISY  # the second pair's AMP run
    baselines, candidates = split_pairs(runs)
    median = median_pair(baselines, candidates)
    interval = speedup_interval(baselines, candidates)
    assert median == (runs[0], runs[1])
    assert interpret(*median, interval).startswith("amp-bf16 trained 1.56x as fast")  # the median pair alone
    sentence = interpret(*median, interval, runs)
    assert sentence.startswith("The speedup is uncertain: the timing of 1 of the 6 runs was noisy (pair 2's amp-bf16 "
                               "run: other processes used 48%")


def test_a_recorded_repeated_comparison_is_uncertain():
    """Three real alternating pairs from `compare --repeats 3` on this project's loaded CPU (tests/recorded/)."""
    import json
    from pathlib import Path

    from trainer.results import RunResult, median_pair, speedup_interval, split_pairs

    recorded = json.loads((Path(__file__).parents[1] / "recorded" / "repeated_compare_cpu.json").read_text())
    runs = [RunResult.from_dict(run) for run in recorded["runs"]]
    baselines, candidates = split_pairs(runs)
    interval = speedup_interval(baselines, candidates)
    assert interval.to_dict() == recorded["speedup"]  # the app's interval is the command line's
    noisy = sum(run.timing_quality["verdict"] == "noisy" for run in runs)
    assert noisy >= 1
    sentence = interpret(*median_pair(baselines, candidates), interval, runs)
    # Every pair several times slower, bf16 emulated on this CPU: the cause first, the noise after it.
    assert interval.high < 1 and sentence.startswith("amp-bf16 took 6.67x the fp32 time here because this CPU")
    assert f"the timing of {noisy} of the 6 runs was noisy (pair 1's" in sentence


def test_amp_bf16_slower_on_a_cpu_without_bf16_instructions_is_put_down_to_emulation():
    cpu = {"device_type": "cpu", "device_name": "AMD EPYC", "cpu_flags": []}
    sentence = interpret(make_result("fp32", 10.0, environment=cpu), make_result("amp-bf16", 80.0, environment=cpu))
    assert sentence.startswith("amp-bf16 took 8.00x the fp32 time here because this CPU has no bf16 instructions")
    assert "a larger batch" in sentence and "larger width or batch gives it more to save" not in sentence
    amx = {**cpu, "cpu_flags": ["amx_tile", "amx_bf16"]}
    assert interpret(make_result("fp32", 10.0, environment=amx), make_result("amp-bf16", 13.0, environment=amx)
                     ).startswith("amp-bf16 was slower here (1.30x the fp32 time)")


def test_loss_curves_on_top_of_each_other_are_said_to_show_the_16_bit_run_kept_fp32s_course():
    from dataclasses import replace

    from lessons.interpret import LOSS_TRACKS_SHARE, loss_tracking

    baseline, candidate = lab_pair("amp-bf16")
    close = replace(candidate, loss_history=[{**p, "loss": p["loss"] * 1.002} for p in baseline.loss_history])
    sentence = loss_tracking(baseline, close)
    assert sentence.startswith("The two loss curves lie on top of each other: at each of the 4 logged steps the "
                               "amp-bf16 run's loss was within 0.20% of fp32's.")
    apart = replace(candidate, loss_history=[{**p, "loss": p["loss"] * (1 + 2 * LOSS_TRACKS_SHARE)}
                                             for p in baseline.loss_history])
    assert loss_tracking(baseline, apart) is None
    assert loss_tracking(baseline, replace(candidate, loss_history=[])) is None


def test_machines_are_classed_by_what_decides_amps_outcome_on_them():
    from lessons.verdicts import machine_class

    assert machine_class({"device_type": "cuda", "device_name": "NVIDIA H200"}) == "NVIDIA H200"
    assert machine_class({"device_type": "cpu", "cpu_flags": ["avx512f"]}) == ("a CPU without bf16 instructions "
                                                                                "(bf16 emulated)")
    assert machine_class({"device_type": "cpu", "cpu_flags": ["avx512f", "avx512_bf16"]}).startswith(
        "a CPU with AVX-512 bf16")
    assert machine_class({"device_type": "cpu", "cpu_flags": ["avx512_bf16", "amx_tile", "amx_bf16"]}) == (
        "a CPU with AMX bf16 units")
