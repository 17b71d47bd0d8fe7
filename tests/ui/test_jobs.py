"""The job plumbing pages share: the progress line a followed job shows, and which run answers a guess."""

import pytest

from tests.server.test_history import make_job
from trainer.isolated import RunOutcome
from trainer.progress import Progress
from ui.jobs import progress_line


def test_the_progress_line_names_a_repeated_pair_as_the_job_panel_does():
    job = make_job("p" * 32, precisions=["fp32", "amp-bf16"] * 3, status="running")
    job.current_run = 2
    job.outcomes = [RunOutcome(config, "ok") for config in job.spec.runs[:2]]
    job.progress = Progress("training", epoch=1, epochs=1, step=2, steps_per_epoch=4, global_step=2, total_steps=4)
    fraction, text = progress_line(job)
    assert text.startswith("run 3 of 6 (FP32, pair 2 of 3, batch 256): epoch 1/1 · batch 2/4")
    assert fraction == (2 + 0.5) / 6  # two runs done, the third half way


def test_the_progress_line_numbers_a_sweeps_recurring_precision_and_a_single_run_says_only_its_state():
    sweep = make_job("s" * 32, precisions=["fp32", "amp-bf16", "fp32", "amp-bf16"], status="running", kind="sweep")
    sweep.current_run = 2
    assert progress_line(sweep)[1].startswith("run 3 of 4 (FP32 #2, batch 256): ")
    single = make_job("t" * 32, precisions=["amp-fp16"], status="running", kind="run")
    single.current_run = 0
    assert not progress_line(single)[1].startswith("run ")


def test_a_guess_is_checked_against_the_first_comparison_queued_after_it():
    from ui.jobs import speedup_since

    before = make_job("b" * 32, created_at=100.0)
    after = make_job("a" * 32, created_at=200.0)
    running = make_job("r" * 32, created_at=150.0, status="running")
    assert speedup_since([before], 150.0) is None  # a comparison made before the guess does not answer it
    assert speedup_since([before, running], 120.0) is None  # the run it was made for has not finished
    assert speedup_since([before, after], 150.0) == pytest.approx(
        after.results[0].total_time_s / after.results[1].total_time_s)
    assert speedup_since([before, after], None) is None  # no guess, no answer


def test_a_report_is_built_from_the_stores_found_in_the_pages_run_and_named_for_the_learner(monkeypatch, tmp_path):
    import threading

    from server.guesses import GuessStore
    from server.history import HistoryStore
    from ui import jobs, server_bundle

    history = HistoryStore(tmp_path / "history.sqlite3")
    guesses = GuessStore(history)
    guesses.lock("ada", "run-speedup", "How many times as fast?", 1.5, fmt="%.2fx")

    class Manager:
        device_type = "cpu"

        def jobs_for_learner(self, learner):
            return [make_job("a" * 32, learner_id=learner, label="Ada's <first> comparison")]

    monkeypatch.setattr(server_bundle, "job_manager", Manager)
    monkeypatch.setattr(server_bundle, "guesses", lambda: guesses)
    build = jobs.report_builder("ada", "Ada L.")
    monkeypatch.setattr(server_bundle, "job_manager", None)  # the builder needs nothing more from the page's run
    built = []
    worker = threading.Thread(target=lambda: built.append(build()))  # Streamlit calls it off the script thread
    worker.start()
    worker.join(60)
    assert "AMP Lab report: Ada L." in built[0] and "Ada&#x27;s &lt;first&gt; comparison" in built[0]
    assert "1.50x" in built[0]
    assert jobs.report_file_name("Ada L. / room 4").startswith("amp-lab-report-ada-l-room-4-")
    assert jobs.report_file_name("ü").startswith("amp-lab-report-learner-")


# ---- the one way a page queues its job or follows it ---------------------------------------------------------


def queue_or_follow_script():
    from server.records import JobSpec
    from trainer.config import RunConfig
    from ui import jobs

    run = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, test_subset=32)
    jobs.queue_or_follow("test_job", "Queue it", JobSpec("run", [run], label="a test run"), failed="It did not finish")


def test_a_page_queues_its_job_follows_it_then_says_why_it_ended_and_offers_the_button_again(tmp_path, monkeypatch):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from ui import server_bundle

    monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("AMP_LAB_DEVICE", "cpu")
    monkeypatch.setenv("AMP_LAB_CLASS_MODE", "off")
    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    manager.pause()  # the job waits, as behind other learners' jobs
    try:
        at = AppTest.from_function(queue_or_follow_script, default_timeout=60).run()
        next(b for b in at.button if b.label == "Queue it").click().run()
        assert not at.exception
        job_id = at.session_state["test_job"]
        assert [b.label for b in at.button] == ["Cancel"]  # followed in the button's place, with its Cancel
        assert [i.value for i in at.info] == ["Waiting in the queue at position 1: the instructor has paused the "
                                              "queue; it starts once they resume it."]
        manager.cancel_any(job_id, "too long for today")
        at.run()
        assert [e.value for e in at.error] == [
            "It did not finish: cancelled by the instructor (too long for today) before it started"]
        assert [b.label for b in at.button] == ["Queue it"] and "test_job" not in at.session_state
        assert not at.run().error  # said once: the page forgot the job
    finally:
        st.cache_resource.clear()
