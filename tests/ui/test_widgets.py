"""The Streamlit pieces several pages draw: the comparison summary (through AppTest) and the pure helpers."""

import time
from datetime import UTC, datetime

from streamlit.testing.v1 import AppTest

from server.devices import Slot
from server.instructor import Capacity
from server.records import JobSpec, RunOutcome
from tests.lessons.test_interpret import NOISY, STEADY
from tests.server.test_history import make_job
from tests.ui_fixtures import lab_pair
from trainer.config import RunConfig
from ui.charts import named_results, run_modes, run_names
from ui.widgets import (
    capacity_sentences,
    live_losses,
    queue_caption,
    settings_rows,
    waiting_line,
    when,
)


def summary_script(results):
    from ui.charts import run_labels
    from ui.widgets import comparison_summary

    comparison_summary(run_labels(results), key="test")


def three_pairs(noisy_index: int | None = None) -> list:
    """Three alternating fp32/amp-bf16 pairs, speedups 1.56x, 1.67x and 1.46x (the median pair is the first), every
    run steady but the one at `noisy_index`."""
    runs = []
    for fp32_s in (75.0, 80.0, 70.0):
        baseline, candidate = lab_pair("amp-bf16")
        baseline.total_time_s = fp32_s
        baseline.timing_quality = candidate.timing_quality = STEADY
        runs += [baseline, candidate]
    if noisy_index is not None:
        runs[noisy_index].timing_quality = NOISY
    return runs


def summary_of(results) -> AppTest:
    at = AppTest.from_function(summary_script, args=(results,), default_timeout=30).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def what_this_says(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("**What this says:**"))


def test_a_noisy_run_outside_the_median_pair_makes_the_summary_uncertain():
    at = summary_of(three_pairs(noisy_index=3))  # the second pair's AMP run; the median pair is steady
    assert what_this_says(at).startswith(
        "**What this says:** The speedup is uncertain: the timing of 1 of the 6 runs was noisy (pair 2's amp-bf16 run: "
        "other processes used 48%")
    (warning,) = at.warning  # one line for the noise, not one box per run and reason
    assert warning.value.startswith("1 of the 6 runs (AMP (bf16) #2) was timed while other work shared the machine: "
                                    "other processes used 48%")


def test_a_steady_repeated_comparison_states_the_median_speedup():
    at = summary_of(three_pairs())
    assert what_this_says(at).startswith("**What this says:** amp-bf16 trained 1.56x as fast as fp32 (36% less time; "
                                         "1.46x to 1.67x over 3 alternating pairs)")
    assert not at.warning


def test_repeated_pairs_are_named_by_pair_and_other_runs_numbered():
    repeated = make_job("r" * 32, precisions=["fp32", "amp-bf16"] * 3, status="running")
    assert run_names(repeated.spec) == [f"{name}, pair {pair} of 3" for pair in (1, 2, 3)
                                        for name in ("FP32", "AMP (bf16)")]
    assert run_names(make_job("o" * 32).spec) == ["FP32", "AMP (bf16)"]
    sweep = JobSpec("sweep", [RunConfig(precision=p, batch_size=b) for b in (32, 64) for p in ("fp32", "amp-bf16")])
    assert run_names(sweep) == ["FP32", "AMP (bf16)", "FP32 #2", "AMP (bf16) #2"]


def test_the_live_loss_chart_keeps_each_run_of_a_precision_apart():
    job = make_job("l" * 32, precisions=["fp32", "amp-bf16"] * 2, status="running")
    job.live_losses = [[{"step": 4, "loss": 2.3}], [{"step": 4, "loss": 2.2}], [{"step": 4, "loss": 2.1}], []]
    assert live_losses(job) == {
        "FP32, pair 1 of 2": [{"step": 4, "loss": 2.3}],
        "AMP (bf16), pair 1 of 2": [{"step": 4, "loss": 2.2}],
        "FP32, pair 2 of 2": [{"step": 4, "loss": 2.1}],  # not merged into the first fp32 run's line
    }


def test_results_keep_the_names_their_runs_had_while_training():
    job = make_job("n" * 32, precisions=["fp32", "amp-bf16"] * 2)
    named = named_results(job)
    assert list(named) == ["FP32, pair 1 of 2", "AMP (bf16), pair 1 of 2", "FP32, pair 2 of 2", "AMP (bf16), pair 2 of 2"]
    assert list(named.values()) == job.results
    assert run_modes(job.spec) == {name: result.precision for name, result in named.items()}
    # A run that did not finish keeps its place: the runs after it keep their own names.
    job.outcomes[1] = RunOutcome(job.spec.runs[1], "failed", error="out of memory")
    assert list(named_results(job)) == ["FP32, pair 1 of 2", "FP32, pair 2 of 2", "AMP (bf16), pair 2 of 2"]


def test_capacity_is_said_for_the_starting_settings_and_for_what_the_class_ran():
    label = "fp32 vs amp-bf16, 5 epochs, batch 256, all 50,000 synthetic images, dataloader loader, width 1"
    coarse, recent = capacity_sentences(Capacity(4338.0, 0.83, from_history=False), label, 265.4, workers=1)
    assert coarse == (f"At the Run page's starting settings ({label}), one comparison takes about 72.3 min (a coarse "
                      "estimate for this kind of device, right to within a few times, until this server has run those "
                      "modes): about **0.8 learners per hour** on its 1 worker, one comparison each.")
    assert recent == ("As the class's recent comparisons ran here, with their own settings: about 265 learners per "
                      "hour on its 1 worker, one comparison each (queue waits left out).")
    measured, none_yet = capacity_sentences(Capacity(132.0, 218.2, from_history=True), label, None, workers=8)
    assert "(estimated from this server's own runs of those modes): about **218 learners per hour** on its 8 workers" \
        in measured
    assert none_yet == "No comparison has finished on this server yet, so there is no measured capacity."
    assert capacity_sentences(None, label, None, 1)[0].endswith("there is no estimate for this device yet.")


def test_the_queue_caption_counts_the_workers_and_the_jobs_running_on_them():
    views = [make_job(c * 32, status=s) for c, s in (("a", "running"), ("b", "running"), ("c", "queued"))]
    gpus = [Slot("GPU 0"), Slot("GPU 1")]
    assert queue_caption(views, gpus, 90.0) == (
        "This server has 2 workers (GPU 0, GPU 1): 2 jobs running now, 1 waiting; a job submitted now would start "
        "in about 90.0 s.")
    assert queue_caption([], [Slot("cpu")], 0.0).startswith("This server has 1 worker (cpu): 0 jobs running now, "
                                                            "0 waiting;")

    assert queue_caption(views, [], None) == (
        "This server has no worker now: the cluster it runs jobs on has no GPU (or node) for the class, so jobs "
        "wait until one joins. 2 jobs running, 1 waiting.")


def test_the_consoles_limits_show_every_setting_and_no_secret():
    from server.settings import Settings

    rows = {row["setting"]: row for row in settings_rows(Settings(gpus=[0, 2], instructor_password="x" * 12))}
    assert (rows["gpus"]["value"], rows["max_subset"]["value"], rows["ray_address"]["value"]) == ("0, 2", "none",
                                                                                                  "(empty)")
    assert rows["instructor_password"]["value"] == "set (hidden)"
    assert rows["silent_run_limit_s"]["variable"] == "AMP_LAB_SILENT_RUN_LIMIT_S"


def test_a_waiting_job_is_told_what_it_waits_for():
    assert waiting_line(3, 90.0, 2, paused=False) == "Waiting in the queue at position 3; it should start in about 90.0 s."
    assert waiting_line(3, None, 2, paused=False) == (
        "Waiting in the queue at position 3; when it starts depends on jobs ahead whose length cannot be estimated yet.")
    assert waiting_line(1, 0.0, 2, paused=True) == (
        "Waiting in the queue at position 1: the instructor has paused the queue; it starts once they resume it.")
    assert waiting_line(1, None, 0, paused=False).endswith("has no GPU (or node) for the class, so jobs wait until one "
                                                           "joins.")


def test_every_time_is_shown_in_one_style_in_utc_with_the_zone_said(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")  # the server's own zone must not show through
    time.tzset()
    try:
        moment = datetime(2026, 12, 1, 2, 10, 59, tzinfo=UTC)
        assert when(moment.timestamp()) == "2026-12-01 02:10 UTC"  # a job's epoch seconds
        assert when(moment.isoformat(timespec="seconds")) == "2026-12-01 02:10 UTC"  # a result's started_at
        assert when("2026-12-01T02:10:59.123456") == "2026-12-01 02:10 UTC"  # no zone written: UTC
        assert when("2026-12-01T03:10:00+01:00") == "2026-12-01 02:10 UTC"
        assert when(None) == when("") == when("not a time") == "-"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def charts_script(results):
    from ui.charts import run_labels
    from ui.widgets import comparison_charts

    comparison_charts(run_labels(results), key="test")


def test_loss_curves_on_top_of_each_other_are_explained_under_the_charts():
    at = AppTest.from_function(charts_script, args=(list(lab_pair("amp-bf16")),), default_timeout=30).run()
    assert not at.exception
    assert any(c.value.startswith("The two loss curves lie on top of each other") for c in at.caption)
