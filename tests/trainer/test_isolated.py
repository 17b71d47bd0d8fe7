"""Runs in a fresh child process: a result, a cancel, a crash, a kill from outside and a typed error."""

import os
import signal
import time
from dataclasses import replace

import pytest

from trainer.config import RunConfig
from trainer.isolated import PrestartedRunner, RunOutcome, run_isolated

TINY = RunConfig(data="synthetic", device="cpu", loader="resident", num_workers=0, epochs=1, batch_size=16,
                 subset=32, test_subset=16, log_every=1)


@pytest.mark.slow
def test_a_run_in_a_child_returns_its_result_and_progress():
    reports, pids = [], []
    outcome = run_isolated(TINY, on_progress=reports.append, on_spawn=pids.append)
    assert outcome.status == "ok", outcome.error
    assert outcome.error is None and outcome.error_kind is None
    assert outcome.result.total_steps == 2 and outcome.result.config == TINY
    assert [r.loss for r in reports if r.loss is not None] == [p["loss"] for p in outcome.result.loss_history]
    assert reports[-1].phase == "done"
    assert len(pids) == 1 and pids[0] != os.getpid()
    assert RunOutcome.from_dict(outcome.to_dict()) == outcome


def test_cancel_terminates_the_child():
    # Cancelled before the child gets far: the parent side is the same at any point of the run.
    outcome = run_isolated(replace(TINY, epochs=50), should_cancel=lambda: True)
    assert outcome.status == "cancelled" and outcome.error_kind == "CancelledError"
    assert outcome.result is None


def test_a_child_killed_from_outside_is_a_crash_with_the_signal():
    outcome = run_isolated(replace(TINY, epochs=50), on_spawn=lambda pid: os.kill(pid, signal.SIGKILL))
    assert outcome.status == "failed" and outcome.error_kind == "crashed"
    assert "SIGKILL" in outcome.error and "\n" not in outcome.error


def test_a_child_that_cannot_start_is_a_crash_with_its_exit_status():
    outcome = run_isolated(TINY, env={"PYTHONHOME": "/nonexistent-python-home"})
    assert outcome.status == "failed" and outcome.error_kind == "crashed"
    assert "exited with status" in outcome.error


@pytest.mark.slow
def test_a_trainer_error_in_the_child_keeps_its_type_and_message():
    outcome = run_isolated(replace(TINY, batch_size=0))
    assert outcome.status == "failed"
    assert outcome.error_kind == "ConfigError"
    assert outcome.error == "batch size must be between 1 and 65536, got 0"


@pytest.mark.parametrize("status", ["ok", "failed", "cancelled"])
def test_outcome_dict_round_trip_without_a_result(status):
    outcome = RunOutcome(TINY, status, error=None if status == "ok" else "x", error_kind=None)
    assert RunOutcome.from_dict(outcome.to_dict()) == outcome


@pytest.mark.slow
def test_a_prestarted_child_runs_the_next_config_and_another_waits_after_it():
    runner = PrestartedRunner()
    try:
        runner.prestart({"AMP_LAB_MARK": "a"})
        (waiting,) = runner._ready.values()
        pids = []
        outcome = runner(TINY, env={"AMP_LAB_MARK": "a"}, on_spawn=pids.append)
        assert outcome.status == "ok", outcome.error
        assert pids == [waiting.pid]  # the run used the process started ahead
        (after,) = runner._ready.values()
        assert after.pid != waiting.pid and after.poll() is None
    finally:
        runner.close()
    deadline = time.monotonic() + 10
    while after.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert after.poll() is not None and not runner._ready


@pytest.mark.slow
def test_a_child_that_reports_and_then_hangs_is_stopped_and_its_worker_freed():
    """A child that has said how its run ended but does not exit (a hang at exit, or leftover DataLoader workers
    holding its stdout open) is stopped after the grace period, not waited for forever."""
    import queue
    import subprocess
    import sys
    import threading

    from trainer import isolated

    reports_then_hangs = ("import json, time; print(json.dumps({'event': 'error', 'kind': 'TrainerError', "
                          "'message': 'boom'}), flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", reports_then_hangs], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    events: queue.Queue = queue.Queue()
    threading.Thread(target=isolated._read_events, args=(child.stdout, events), daemon=True).start()
    started = time.monotonic()
    try:
        outcome = isolated._follow(child, TINY, events, None, None)
    finally:
        isolated._kill_group(child.pid)
    assert (outcome.status, outcome.error) == ("failed", "boom")
    assert time.monotonic() - started < 3 * isolated.TERMINATE_GRACE_S  # not the child's 60 s
    assert child.poll() is not None


def test_a_crash_message_stays_one_short_line_however_long_the_childs_last_line():
    from trainer.errors import ONE_LINE_CHARS as LAST_MESSAGE_CHARS
    from trainer.isolated import _crash_outcome

    outcome = _crash_outcome(TINY, 1, ["Traceback ...", "RuntimeError: " + "x" * 5000, "   "])
    assert outcome.error.startswith("the training process exited with status 1 without a result; last message: "
                                    "RuntimeError: xxx")
    assert outcome.error.endswith("...") and len(outcome.error) < LAST_MESSAGE_CHARS + 100


def test_a_finished_runs_settings_are_stored_once_in_its_result_and_read_back():
    from trainer.results import RunResult

    result = RunResult(config=TINY, environment={}, total_time_s=1.0, epoch_times_s=[1.0], steady_images_per_s=None,
                       peak_memory={}, loss_history=[], test_accuracy=None)
    stored = RunOutcome(TINY, "ok", result=result).to_dict()
    assert "config" not in stored and stored["result"]["config"] == TINY.to_dict()
    assert RunOutcome.from_dict(stored).config == TINY
    failed = RunOutcome(TINY, "failed", error="out of memory").to_dict()
    assert failed["config"] == TINY.to_dict() and RunOutcome.from_dict(failed).config == TINY
