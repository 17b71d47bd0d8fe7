import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from server.devices import Slot
from server.history import HistoryStore
from server.jobs import JobManager
from server.records import JobSpec
from server.settings import Settings
from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.isolated import RunOutcome, run_isolated
from trainer.progress import Progress
from trainer.results import RunResult

WAIT_S = 20.0


def wait_until(predicate, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the job manager")
        time.sleep(0.01)


def ok_outcome(config: RunConfig) -> RunOutcome:
    result = RunResult(
        config=replace(config),
        environment={"device_type": "cpu"},
        total_time_s=0.5,
        epoch_times_s=[0.5],
        steady_images_per_s=1000.0,
        peak_memory={},
        loss_history=[{"step": 1, "epoch": 1, "loss": 2.0}],
        test_accuracy=0.1,
        train_images=config.subset or 50_000,
    )
    return RunOutcome(config, "ok", result=result)


class FakeRunner:
    """Stands in for run_isolated: records calls and overlap; holds each run until released (if gated)."""

    def __init__(self, gated: bool = False, fail_batch: int | None = None):
        self.release = threading.Event()
        if not gated:
            self.release.set()
        self.fail_batch = fail_batch
        self.calls: list[RunConfig] = []
        self.envs: list[dict] = []
        self.active_on: dict[str, int] = {}  # CUDA_VISIBLE_DEVICES -> runs there now
        self.max_active_on: dict[str, int] = {}
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()

    def __call__(self, config, on_progress=None, should_cancel=None, on_spawn=None, env=None):
        gpu = (env or {}).get("CUDA_VISIBLE_DEVICES", "")
        with self.lock:
            self.calls.append(config)
            self.envs.append(dict(env or {}))
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.active_on[gpu] = self.active_on.get(gpu, 0) + 1
            self.max_active_on[gpu] = max(self.max_active_on.get(gpu, 0), self.active_on[gpu])
        try:
            on_spawn(4242)
            on_progress(Progress("training", 1, 1, 1, 4, 1, 4, loss=2.5, images_per_s=900.0, eta_s=1.0))
            while not self.release.wait(0.01):
                if should_cancel():
                    return RunOutcome(config, "cancelled", error="the run was cancelled", error_kind="CancelledError")
            time.sleep(0.005)  # long enough that an overlapping run would be seen
            if config.batch_size == self.fail_batch:
                message = f"batch size {config.batch_size} does not fit in device memory; try a smaller batch"
                return RunOutcome(config, "failed", error=message, error_kind="OutOfMemoryError")
            return ok_outcome(config)
        finally:
            with self.lock:
                self.active -= 1
                self.active_on[gpu] -= 1

    @property
    def seeds(self) -> list[int]:
        return [config.seed for config in self.calls]


def compare_spec(seed: int = 0, batch_size: int = 64, **overrides) -> JobSpec:
    runs = [
        RunConfig(precision=p, epochs=1, batch_size=batch_size, data="synthetic", subset=256, seed=seed, **overrides)
        for p in ("fp32", "amp-bf16")
    ]
    return JobSpec("compare", runs, label=f"job {seed}")


def run_spec(seed: int = 0, **overrides) -> JobSpec:
    values = {"epochs": 1, "batch_size": 64, "data": "synthetic", "subset": 256, "seed": seed, **overrides}
    return JobSpec("run", [RunConfig(**values)])


@pytest.fixture
def settings(tmp_path):
    return Settings(state_dir=str(tmp_path / "state"), data_root=str(tmp_path / "data"), max_queued_per_learner=2,
                    class_mode=False)


@pytest.fixture
def make_manager(settings):
    managers = []

    def make(runner, with_settings=None, **kwargs):
        kwargs.setdefault("device_type", "cpu")
        manager = JobManager(with_settings or settings, runner=runner, **kwargs).start()
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        manager.shutdown(wait=True, timeout=WAIT_S)


def test_jobs_run_one_at_a_time_round_robin_across_learners(make_manager):
    runner = FakeRunner()
    manager = make_manager(runner)
    ids = [manager.submit(f"learner-{n % 3}", run_spec(seed=n)) for n in range(6)]
    wait_until(lambda: all(manager.get(i).finished for i in ids))
    assert runner.seeds == list(range(6))
    assert runner.max_active == 1
    assert all(manager.get(i).status == "done" for i in ids)


def test_queued_jobs_see_their_position_and_an_estimated_wait(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    assert manager.wait_for_new_job() == (0, 0.0)
    first = manager.submit("a", compare_spec(1))
    wait_until(lambda: manager.get(first).progress is not None)
    second = manager.submit("b", compare_spec(2))
    third = manager.submit("c", run_spec(3))
    running, next_up, last = manager.get(first), manager.get(second), manager.get(third)
    assert running.queue_position is None and running.progress.images_per_s == 900.0
    assert [list(points) for points in running.live_losses] == [[{"step": 1, "epoch": 1, "loss": 2.5}]]
    assert (next_up.queue_position, last.queue_position) == (1, 2)
    assert 0 < next_up.estimated_wait_s < last.estimated_wait_s
    assert next_up.estimated_total_s > 0
    assert manager.queue_length() == 2
    ahead, wait = manager.wait_for_new_job()
    assert ahead == 3 and wait > last.estimated_wait_s
    runner.release.set()
    wait_until(lambda: manager.get(third).status == "done")
    assert manager.get(second).queue_position is None


def test_a_session_may_have_only_so_many_jobs_waiting(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    first = manager.submit("a", run_spec(1))
    manager.submit("a", run_spec(2))
    with pytest.raises(ConfigError, match="you already have 2 jobs waiting or running; wait for one to finish or cancel it"):
        manager.submit("a", run_spec(3))
    manager.submit("b", run_spec(4))  # another session is not affected
    assert manager.cancel(first, "a")
    wait_until(lambda: manager.get(first).finished)
    manager.submit("a", run_spec(5))


def test_the_whole_queue_is_capped_with_one_line_that_gives_the_wait(make_manager, settings):
    settings.max_queued_total = 2
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    running = manager.submit("a", run_spec(1))
    wait_until(lambda: manager.get(running).status == "running")  # the running job is not waiting
    manager.submit("b", run_spec(2))
    manager.submit("c", run_spec(3))
    with pytest.raises(ConfigError) as refused:
        manager.submit("d", run_spec(4))
    message = str(refused.value)
    assert re.fullmatch(
        r"the class queue is full: 2 jobs are waiting \(this server allows 2\) and the current wait is about "
        r"\d+\.\d (s|min); try again later",
        message,
    ), message
    runner.release.set()
    wait_until(lambda: manager.queue_length() == 0)
    manager.submit("d", run_spec(4))


def test_cancel_a_queued_job(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    running = manager.submit("a", run_spec(1))
    waiting = manager.submit("b", run_spec(2))
    wait_until(lambda: manager.get(running).status == "running")
    assert manager.cancel(waiting, "b")
    view = manager.get(waiting)
    assert view.status == "cancelled" and view.queue_position is None
    assert manager.queue_length() == 0
    assert not manager.cancel(waiting, "b")  # already over
    runner.release.set()
    wait_until(lambda: manager.get(running).finished)
    assert runner.seeds == [1]
    assert manager.store.get_job(waiting).status == "cancelled"


def test_cancel_a_running_job_then_the_queue_goes_on(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    running = manager.submit("a", compare_spec(1))
    after = manager.submit("b", run_spec(2))
    wait_until(lambda: runner.calls)
    assert manager.cancel(running, "a")
    wait_until(lambda: manager.get(running).finished)
    view = manager.get(running)
    assert view.status == "cancelled" and "cancelled" in view.error
    assert [o.status for o in view.outcomes] == ["cancelled"]  # the second run never started
    runner.release.set()
    wait_until(lambda: manager.get(after).finished)
    assert manager.get(after).status == "done"


def test_only_the_owner_can_cancel(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    running = manager.submit("owner", run_spec(1))
    waiting = manager.submit("owner", run_spec(2))
    assert not manager.cancel(running, "intruder")
    assert not manager.cancel(waiting, "intruder")
    assert not manager.cancel("not-a-job", "owner")
    runner.release.set()
    wait_until(lambda: manager.get(waiting).finished)
    assert [manager.get(i).status for i in (running, waiting)] == ["done", "done"]


def test_a_history_save_that_fails_in_any_way_does_not_stop_the_queue(make_manager, monkeypatch):
    manager = make_manager(FakeRunner())
    save = manager.store.save_job

    def save_but_not_the_first_start(view):
        if view.status == "running" and view.id == first:
            raise RuntimeError("disk on fire")  # not a HistoryError: it killed the worker thread, for good
        save(view)

    monkeypatch.setattr(manager.store, "save_job", save_but_not_the_first_start)
    manager.pause()
    first, second = manager.submit("a", run_spec(1)), manager.submit("b", run_spec(2))
    manager.resume()
    wait_until(lambda: manager.get(second).finished)
    assert manager.get(first).status == manager.get(second).status == "done"


def test_a_finished_job_the_history_refused_is_saved_with_the_next_change(make_manager, monkeypatch):
    manager = make_manager(FakeRunner())
    save, refused = manager.store.save_job, []

    def refuse_the_first_jobs_end(view):
        if view.learner_id == "a" and view.status == "done" and not refused:
            refused.append(view.id)
            raise OSError("disk full")
        save(view)

    monkeypatch.setattr(manager.store, "save_job", refuse_the_first_jobs_end)
    first = manager.submit("a", run_spec(1))
    wait_until(lambda: refused)
    assert manager.store.get_job(first).status == "running"  # the store's copy is behind
    second = manager.submit("b", run_spec(2))  # its first save also brings the first job's end to the history
    wait_until(lambda: manager.get(second).finished)
    assert manager.store.get_job(first).status == "done" and manager.store.get_job(first).outcomes


def test_a_failed_run_fails_its_job_and_the_next_job_runs(make_manager):
    runner = FakeRunner(fail_batch=4096)
    manager = make_manager(runner)
    failing = manager.submit("a", compare_spec(1, batch_size=4096))
    after = manager.submit("b", run_spec(2))
    wait_until(lambda: manager.get(after).finished)
    view = manager.get(failing)
    assert view.status == "failed"
    assert view.error.startswith("run 1 of 2 (fp32): batch size 4096 does not fit in device memory")
    assert len(view.outcomes) == 1 and view.outcomes[0].error_kind == "OutOfMemoryError"
    assert manager.get(after).status == "done"
    assert manager.store.get_job(failing).error == view.error


class ChattyRunner(FakeRunner):
    """A run that reports progress every 50 ms for `seconds`, then finishes."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def __call__(self, config, on_progress=None, should_cancel=None, on_spawn=None, env=None):
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            on_progress(Progress("training", 1, 1, 1, 4, 1, 4, images_per_s=900.0))
            if should_cancel():
                return RunOutcome(config, "cancelled", error="the run was cancelled", error_kind="CancelledError")
            time.sleep(0.05)
        return ok_outcome(config)


def test_a_run_that_goes_silent_is_stopped_as_hung_and_the_queue_goes_on(make_manager):
    hung = FakeRunner(gated=True)  # one progress report, then nothing until released: a stuck child
    manager = make_manager(hung, silent_run_limit_s=0.5)
    stuck = manager.submit("a", compare_spec(1))
    wait_until(lambda: manager.get(stuck).finished)
    view = manager.get(stuck)
    assert view.status == "failed"
    assert view.error == ("run 1 of 2 (fp32): the run reported no progress for 0.5 s (its last report: training) "
                          "and was stopped as hung (the server's silent_run_limit_s)")
    assert [o.error_kind for o in view.outcomes] == ["StalledError"]  # the second run never started
    assert manager.store.get_job(stuck).error == view.error


def test_a_run_the_cluster_never_starts_is_given_up_saying_so(make_manager):
    def never_scheduled(config, on_progress=None, should_cancel=None, on_spawn=None, env=None):
        while not should_cancel():  # a Ray task waiting for a GPU no node has free: no spawn, no progress
            time.sleep(0.01)
        return RunOutcome(config, "cancelled", error="the run was cancelled", error_kind="CancelledError")

    manager = make_manager(never_scheduled, silent_run_limit_s=0.3)
    job = manager.submit("a", run_spec(1))
    wait_until(lambda: manager.get(job).finished)
    assert manager.get(job).error == ("run 1 of 1 (fp32): the cluster did not start the run within 0.3 s (no free GPU "
                                      "or node), so it was given up (the server's silent_run_limit_s)")


@pytest.mark.slow
def test_a_run_that_keeps_reporting_is_never_taken_for_hung(make_manager):
    manager = make_manager(ChattyRunner(seconds=1.5), silent_run_limit_s=0.5)
    job = manager.submit("a", run_spec(1))
    wait_until(lambda: manager.get(job).finished)
    assert manager.get(job).status == "done"


def test_the_owners_cancel_is_still_a_cancel_under_the_watchdog(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner, silent_run_limit_s=60)
    job = manager.submit("a", run_spec(1))
    wait_until(lambda: runner.calls)
    assert manager.cancel(job, "a")
    wait_until(lambda: manager.get(job).finished)
    assert manager.get(job).status == "cancelled"


def test_a_runner_that_raises_fails_only_its_job(make_manager):
    calls = []

    def runner(config, **callbacks):
        calls.append(config.seed)
        if config.seed == 1:
            raise RuntimeError("spawn failed\nwith a second line")
        return ok_outcome(config)

    manager = make_manager(runner)
    broken = manager.submit("a", run_spec(1))
    fine = manager.submit("a", run_spec(2))
    wait_until(lambda: manager.get(fine).finished)
    assert manager.get(broken).status == "failed"
    assert "spawn failed with a second line" in manager.get(broken).error
    assert manager.get(fine).status == "done" and calls == [1, 2]


def test_three_learners_submitting_at_once_all_finish_round_robin(make_manager, settings):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    barrier = threading.Barrier(3)
    submitted: dict[int, list[str]] = {}

    def learner(index: int) -> None:
        barrier.wait()
        submitted[index] = [manager.submit(f"learner-{index}", run_spec(index * 10 + n)) for n in range(2)]

    threads = [threading.Thread(target=learner, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runner.release.set()
    ids = [job_id for own in submitted.values() for job_id in own]
    wait_until(lambda: all(manager.get(i).finished for i in ids))
    views = [manager.get(i) for i in ids]
    assert len(set(ids)) == 6 and all(v.status == "done" and len(v.results) == 1 for v in views)
    # Round robin: every learner's first job before any learner's second, each learner's own in their order.
    assert {seed // 10 for seed in runner.seeds[:3]} == {0, 1, 2} and {seed % 10 for seed in runner.seeds[:3]} == {0}
    for index in range(3):
        own = [seed for seed in runner.seeds if seed // 10 == index]
        assert own == [index * 10, index * 10 + 1]
    assert runner.max_active == 1
    assert len(HistoryStore(settings.history_path).list_jobs()) == 6


@pytest.mark.parametrize("running_first", [False, True], ids=["paused", "one-running"])
def test_a_learners_second_job_waits_behind_everyones_first(make_manager, running_first):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    if not running_first:
        manager.pause()
    names = {}
    for learner in "ABC":
        for n in (1, 2):
            names[manager.submit(learner, run_spec(seed=ord(learner) * 10 + n))] = f"{learner}{n}"
            if running_first and len(names) == 1:
                wait_until(lambda: runner.calls)  # A1 is running before the others queue
    order = [names[view.id] for view in manager.queue_views()]
    assert order == ["A1", "B1", "C1", "A2", "B2", "C2"]
    positions = {names[view.id]: view.queue_position for view in manager.queue_views() if view.status == "queued"}
    assert positions == {"B1": 1, "C1": 2, "A2": 3, "B2": 4, "C2": 5} if running_first else positions["A1"] == 1
    # A newcomer's first job goes before the class's second ones; their line counts only other learners' jobs.
    assert manager.wait_for_new_job("D")[0] == (3 if running_first else 3)
    assert manager.wait_for_new_job("A")[0] == (4 if running_first else 4)
    manager.resume()
    runner.release.set()
    wait_until(lambda: len(runner.calls) == 6)
    ran = {ord(learner) * 10 + n: f"{learner}{n}" for learner in "ABC" for n in (1, 2)}
    assert [ran[config.seed] for config in runner.calls] == ["A1", "B1", "C1", "A2", "B2", "C2"]


def test_history_survives_a_restart_and_a_stranded_job_runs_again(make_manager, settings):
    first = make_manager(FakeRunner())
    done = first.submit("a", compare_spec(1))
    wait_until(lambda: first.get(done).finished)
    first.shutdown(wait=True)
    # A job that a crashed process left "running" in the history.
    gated = FakeRunner(gated=True)
    crashed = make_manager(gated)
    stranded = crashed.submit("a", run_spec(2))
    wait_until(lambda: gated.calls)  # its last write before the run ends has happened

    runner = FakeRunner()
    restarted = JobManager(settings, runner=runner, device_type="cpu").start()
    try:
        assert (restarted.requeued_at_start, restarted.interrupted_at_start) == (1, 0)
        old = restarted.get(done)
        assert old.status == "done" and [r.precision for r in old.results] == ["fp32", "amp-bf16"]
        wait_until(lambda: restarted.get(stranded).finished)
        again = restarted.get(stranded)
        assert again.status == "done" and again.extras["restarts"] == 1
        assert again.extras["notice"].startswith("The server restarted while this job was running")
        assert [config.seed for config in runner.calls] == [2]
        assert {v.id for v in restarted.jobs_for_learner("a")} == {done, stranded}
    finally:
        restarted.shutdown(wait=True)
        gated.release.set()


def test_a_restart_with_a_requeued_job_logs_no_traceback(make_manager, caplog):
    """Issue 33: each restart with a re-queued job logged `AttributeError: 'JobManager' object has no attribute
    'slots'`; the unfinished jobs are now taken up once the workers' slots exist."""
    first = make_manager(FakeRunner())
    first.pause()
    waiting = first.submit("a", run_spec(1))
    first.shutdown(wait=True, timeout=WAIT_S)
    with caplog.at_level(logging.DEBUG):
        restarted = make_manager(FakeRunner())
        wait_until(lambda: restarted.get(waiting).finished)
    assert restarted.requeued_at_start == 1 and restarted.get(waiting).status == "done"
    assert [record.getMessage() for record in caplog.records if record.exc_info] == []


def test_shutdown_keeps_waiting_jobs_queued_and_the_running_one_runs_again_first(make_manager, settings):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    running = manager.submit("a", run_spec(1))
    wait_until(lambda: manager.get(running).status == "running")
    waiting = [manager.submit("b", run_spec(2)), manager.submit("c", run_spec(3))]
    manager.shutdown(wait=True, timeout=WAIT_S)
    assert manager.store.get_job(running).status == "running"  # the next server takes it up again
    assert [manager.store.get_job(job_id).status for job_id in waiting] == ["queued", "queued"]
    with pytest.raises(ConfigError, match="shut down"):
        manager.submit("d", run_spec(4))

    after = FakeRunner(gated=True)
    restarted = make_manager(after)
    assert (restarted.requeued_at_start, restarted.interrupted_at_start) == (3, 0)
    wait_until(lambda: after.calls)
    assert after.calls[0].seed == 1  # the interrupted job first, then the queue in its order
    assert [view.queue_position for view in map(restarted.get, waiting)] == [1, 2]
    after.release.set()
    wait_until(lambda: all(restarted.get(job_id).finished for job_id in [running, *waiting]))
    assert [config.seed for config in after.calls] == [1, 2, 3]
    assert all(restarted.get(job_id).status == "done" for job_id in [running, *waiting])


def test_a_job_interrupted_twice_fails_and_one_over_new_limits_fails_saying_why(make_manager, settings, tmp_path):
    from dataclasses import replace as with_changes

    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    twice = manager.submit("a", run_spec(1))
    wait_until(lambda: manager.get(twice).status == "running")
    too_long = manager.submit("b", run_spec(2, epochs=3))
    manager.shutdown(wait=True, timeout=WAIT_S)
    second = make_manager(FakeRunner(gated=True), with_changes(settings, max_epochs=2))
    assert (second.requeued_at_start, second.interrupted_at_start) == (1, 1)
    assert second.get(too_long).status == "failed"
    assert second.get(too_long).error == ("the server restarted with settings that refuse this job: 3 epochs is above "
                                         "this server's limit of 2 set by the instructor; choose fewer epochs")
    wait_until(lambda: second.get(twice).status == "running")
    second.shutdown(wait=True, timeout=WAIT_S)
    third = make_manager(FakeRunner(), with_changes(settings, max_epochs=2))
    assert (third.requeued_at_start, third.interrupted_at_start) == (0, 1)
    assert third.get(twice).status == "failed"
    assert third.get(twice).error == "interrupted by a second server restart while it ran; submit the job again"


def test_submit_refuses_bad_specs_with_one_line(make_manager):
    manager = make_manager(FakeRunner())
    bad_specs = {
        "needs 2 runs": JobSpec("compare", [RunConfig()]),
        "unknown job kind": JobSpec("train-forever", [RunConfig()]),
        "above this server's limit of 4096": run_spec(batch_size=8192),
        "above this server's limit of 20": run_spec(epochs=21),
        "unknown precision": run_spec(precision="fp8"),
        "tf32 needs an NVIDIA GPU": run_spec(precision="tf32"),
        "only on at most 5,000 training images": JobSpec("run", [RunConfig(precision="amp-fp16", subset=None)]),
        "at most 120 characters": JobSpec("run", [RunConfig(subset=256)], label="x" * 500),
    }
    for message, spec in bad_specs.items():
        with pytest.raises(ConfigError, match=message) as caught:
            manager.submit("a", spec)
        assert "\n" not in str(caught.value)
    assert manager.store.list_jobs() == []


def test_the_instructors_paths_and_device_are_forced_on_every_run(make_manager, settings):
    runner = FakeRunner()
    manager = make_manager(runner)
    job_id = manager.submit("a", run_spec(1, data_root="/etc", device="cuda"))
    wait_until(lambda: manager.get(job_id).finished)
    assert (runner.calls[0].data_root, runner.calls[0].device) == (settings.data_root, "cpu")
    assert len(job_id) == 32 and int(job_id, 16) >= 0


def test_a_sweep_probes_the_largest_batch_only_on_cuda(make_manager):
    runs = [RunConfig(precision=p, epochs=1, subset=256) for p in ("fp32", "amp-fp16")]
    sweep = JobSpec("sweep", runs, probe_max_batch=True)
    on_cpu = make_manager(FakeRunner())
    cpu_job = on_cpu.submit("a", JobSpec("sweep", sweep.runs[:1], probe_max_batch=True))
    wait_until(lambda: on_cpu.get(cpu_job).finished)
    assert "only on a CUDA GPU" in on_cpu.get(cpu_job).extras["max_batch_note"]

    probed = []

    def prober(base, precisions, should_cancel):
        probed.append((base.precision, precisions, should_cancel()))
        return {"fp32": 2048, "amp-fp16": 4096}

    on_gpu = make_manager(FakeRunner(), device_type="cuda", prober=prober)
    gpu_job = on_gpu.submit("a", sweep)
    wait_until(lambda: on_gpu.get(gpu_job).finished)
    view = on_gpu.get(gpu_job)
    assert view.status == "done" and view.extras["max_batch"] == {"fp32": 2048, "amp-fp16": 4096}
    assert probed == [("fp32", ["fp32", "amp-fp16"], False)]


def tiny_real_config(precision: str) -> RunConfig:
    return RunConfig(
        precision=precision,
        epochs=1,
        batch_size=64,
        data="synthetic",
        loader="resident",
        subset=256,
        test_subset=128,
        num_workers=0,
        log_every=1,
    )


@pytest.mark.slow
def test_a_tiny_real_compare_job_finishes_with_two_results(make_manager):
    manager = make_manager(run_isolated)
    job_id = manager.submit("a", JobSpec("compare", [tiny_real_config("fp32"), tiny_real_config("amp-bf16")]))
    wait_until(lambda: manager.get(job_id).finished, timeout=120)
    view = manager.get(job_id)
    assert view.status == "done", view.error
    assert [o.status for o in view.outcomes] == ["ok", "ok"]
    assert [r.precision for r in view.results] == ["fp32", "amp-bf16"]
    assert all(points for points in view.live_losses)  # progress reached the parent while it ran
    assert len(manager.store.list_runs(device_type="cpu")) == 2


def test_a_run_killed_from_outside_is_marked_failed(make_manager):
    pids = []

    def runner(config, **callbacks):
        spawned = callbacks.pop("on_spawn")

        def on_spawn(pid):
            spawned(pid)
            pids.append(pid)
            os.kill(pid, signal.SIGKILL)  # as an administrator or the OOM killer would

        return run_isolated(config, on_spawn=on_spawn, **callbacks)

    manager = make_manager(runner)
    killed = manager.submit("a", JobSpec("run", [tiny_real_config("fp32")]))
    wait_until(lambda: manager.get(killed).finished, timeout=60)
    view = manager.get(killed)
    assert pids and view.status == "failed"
    assert "killed by SIGKILL" in view.error and view.outcomes[0].error_kind == "crashed"


def test_the_instructor_sees_the_queue_cancels_any_job_and_pauses_the_queue(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    running = manager.submit("ada", run_spec(1))
    waiting = manager.submit("bob", run_spec(2))
    wait_until(lambda: runner.calls)
    assert [(v.id, v.status, v.queue_position) for v in manager.queue_views()] == [
        (running, "running", None), (waiting, "queued", 1)]

    assert manager.cancel_any(waiting)
    assert manager.get(waiting).error == "cancelled by the instructor before it started"
    assert manager.cancel_any(running)
    wait_until(lambda: manager.get(running).finished)
    assert (manager.get(running).status, manager.get(running).error) == (
        "cancelled", "cancelled by the instructor while running")
    assert not manager.cancel_any(running)  # already over

    manager.pause()
    held = manager.submit("ada", run_spec(3))  # learners may still queue while the queue is paused
    time.sleep(0.3)
    assert manager.paused and manager.get(held).status == "queued" and len(runner.calls) == 1
    runner.release.set()
    manager.resume()
    wait_until(lambda: manager.get(held).finished)
    assert manager.get(held).status == "done" and not manager.paused


def fake_gpu_slots(count: int) -> list[Slot]:
    """What server_slots makes of a machine with `count` GPUs, without one."""
    return [
        Slot(f"GPU {n}", {"CUDA_VISIBLE_DEVICES": f"GPU-fake-{n}"}, {"index": n, "uuid": f"GPU-fake-{n}", "name": "Fake"})
        for n in range(count)
    ]


def test_two_gpus_run_two_jobs_at_once_never_two_on_one(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner, device_type="cuda", slots=fake_gpu_slots(2))
    ids = [manager.submit(f"s{n}", run_spec(seed=n)) for n in range(4)]
    wait_until(lambda: runner.active == 2)
    time.sleep(0.05)  # a third run starting now would be seen
    assert runner.active == 2 and manager.queue_length() == 2
    assert sorted(runner.active_on.items()) == [("GPU-fake-0", 1), ("GPU-fake-1", 1)]
    running = [manager.get(i) for i in ids[:2]]
    assert {v.status for v in running} == {"running"}
    assert {v.extras["gpu"]["uuid"] for v in running} == {"GPU-fake-0", "GPU-fake-1"}
    assert manager.wait_for_new_job()[0] == 4
    runner.release.set()
    wait_until(lambda: all(manager.get(i).finished for i in ids))
    assert runner.max_active == 2 and max(runner.max_active_on.values()) == 1
    assert runner.seeds[:2] in ([0, 1], [1, 0]) and sorted(runner.seeds[2:]) == [2, 3]
    stored = manager.store.get_job(ids[3])
    assert stored.status == "done" and stored.extras["gpu"]["name"] == "Fake"


def test_a_compare_job_keeps_both_runs_on_its_gpu(make_manager):
    runner = FakeRunner()
    manager = make_manager(runner, device_type="cuda", slots=fake_gpu_slots(3))
    job_id = manager.submit("a", compare_spec(1))
    wait_until(lambda: manager.get(job_id).finished)
    uuid = manager.get(job_id).extras["gpu"]["uuid"]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in runner.envs] == [uuid, uuid]


def test_the_wait_counts_every_worker(make_manager):
    runner = FakeRunner(gated=True)
    one = make_manager(runner, device_type="cuda", slots=fake_gpu_slots(1))
    two = make_manager(runner, device_type="cuda", slots=fake_gpu_slots(2))
    ids = {manager: [manager.submit(f"s{n}", run_spec(seed=n)) for n in range(4)] for manager in (one, two)}
    wait_until(lambda: runner.active == 3)
    # On one GPU the fourth job waits for three whole jobs; on two, for the first of the two running to end.
    last_on_one, last_on_two = one.get(ids[one][3]), two.get(ids[two][3])
    assert (last_on_one.queue_position, last_on_two.queue_position) == (3, 2)
    assert last_on_one.estimated_wait_s > 2.5 * last_on_two.estimated_wait_s > 0
    assert two.wait_for_new_job()[1] < one.wait_for_new_job()[1]
    runner.release.set()


def test_a_cpu_server_keeps_one_worker(make_manager):
    manager = make_manager(FakeRunner())
    assert [slot.label for slot in manager.slots] == ["cpu"]


@pytest.mark.slow
def test_ray_is_never_imported_without_a_ray_address():
    code = (
        "import sys\n"
        "import server.jobs, server.settings, server.devices, bench.class_sim\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_default_runner_keeps_each_workers_next_process_started_ahead(settings):
    manager = JobManager(settings, device_type="cpu").start()
    try:
        waiting = list(manager._runner._ready.values())
        assert len(waiting) == len(manager.slots) == 1 and waiting[0].poll() is None
    finally:
        manager.shutdown(wait=True, timeout=WAIT_S)
    wait_until(lambda: waiting[0].poll() is not None, timeout=10)  # shutdown let it go


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_server_killed_mid_class_loses_no_job_and_runs_none_twice(tmp_path, stop):
    """One job running and two waiting when the server process is stopped: after the restart the two waiting jobs
    run once each, and the running one runs again, once, first."""
    host = [sys.executable, "-m", "tests.server.restart_host"]
    root = str(Path(__file__).resolve().parents[2])
    first = subprocess.Popen([*host, "submit", str(tmp_path)], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "ready"  # job 1 is running, jobs 2 and 3 wait
    finally:
        first.send_signal(stop)
        first.wait(timeout=30)
    assert (tmp_path / "calls.txt").read_text().split() == ["1"]
    (tmp_path / "release").touch()
    second = subprocess.run([*host, "resume", str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr[-2000:]
    counts, *jobs = map(json.loads, second.stdout.splitlines())
    assert counts == {"requeued": 3, "failed": 0}
    assert jobs == [{"label": "job 1", "status": "done", "restarts": 1},
                    {"label": "job 2", "status": "done", "restarts": 0},
                    {"label": "job 3", "status": "done", "restarts": 0}]
    assert (tmp_path / "calls.txt").read_text().split() == ["1", "1", "2", "3"]  # job 1 again, first; none twice else


def test_in_class_mode_the_door_holds_each_kinds_per_learner_cap_and_turns_sweeps_off(make_manager, settings):
    from dataclasses import replace as with_changes

    from server.offer import Offer

    manager = make_manager(FakeRunner(), with_changes(settings, class_mode=True))
    offer = Offer.for_device(manager.settings, "cpu")
    demo = manager.submit("ada", offer.quick_demo())
    wait_until(lambda: manager.get(demo).finished)
    with pytest.raises(ConfigError, match="this class allows one of its quick demos per learner, and you have had 1"):
        manager.submit("ada", offer.quick_demo())
    manager.submit("bob", offer.quick_demo())  # another learner's own cap
    with pytest.raises(ConfigError, match="the instructor has turned batch-size sweeps off for this class"):
        manager.submit("ada", offer.sweep("amp-bf16", [32]))
    failed = manager.submit("cy", offer.quick_demo())
    manager.cancel(failed, "cy")
    manager.submit("cy", offer.quick_demo())  # a cancelled job does not use up the cap


def test_a_cancel_by_the_instructor_carries_a_reason_for_its_learner(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    running = manager.submit("a", run_spec(1))
    wait_until(lambda: manager.get(running).status == "running")
    waiting = manager.submit("b", run_spec(2))
    manager.cancel_any(waiting, "  too long for   today:\ntry 1 epoch ")
    assert manager.get(waiting).error == "cancelled by the instructor (too long for today: try 1 epoch) before it started"
    manager.cancel_any(running, "x" * 500)
    wait_until(lambda: manager.get(running).finished)
    assert manager.get(running).error == f"cancelled by the instructor ({'x' * 200}) while running"


def test_a_running_job_says_roughly_when_it_ends(make_manager):
    runner = FakeRunner(gated=True)
    manager = make_manager(runner)
    job = manager.submit("a", compare_spec(1))
    wait_until(lambda: manager.get(job).progress is not None)
    assert manager.get(job).remaining_s > 0 and manager.store.get_job(job).remaining_s is None  # live only
    runner.release.set()


def test_an_idle_worker_measures_its_devices_peaks_once_and_again_after_a_run_beat_them(make_manager, monkeypatch,
                                                                                         settings):
    """Issue 32: peaks are measured by the server, once per device, in a fresh process pinned as the worker's jobs
    are, while the worker is idle (not inside a learner's run); a run that beats them has them measured again."""
    import server.jobs
    from trainer.peaks import DevicePeaks

    stored = DevicePeaks("CPU: fake", "2.14.1", matmul_tflops={"fp32": 0.2}, copy_gb_per_s=20.0)
    measured = []

    def measure(args, timeout_s, env):
        measured.append((args, env))
        return stored.to_dict()

    monkeypatch.setattr(server.jobs, "run_python_json", measure)
    beaten_runs = []

    class PeakCarryingRunner(FakeRunner):
        def __call__(self, config, **kwargs):
            outcome = super().__call__(config, **kwargs)
            outcome.result.device_peaks = stored.to_dict()
            return outcome

    def beaten(result):
        beaten_runs.append(result.config.seed)
        return result.config.seed == 1  # the budget's test, answered: the run with seed 1 beat them

    slot = Slot("cpu", {"OMP_NUM_THREADS": "2"})
    manager = make_manager(PeakCarryingRunner(), slots=[slot], peaks_beaten=beaten)
    wait_until(lambda: len(measured) == 1)
    args, env = measured[0]
    assert args == ["-m", "trainer.peaks", "--cache", str(settings.peaks_cache_path), "--device", "cpu"]
    assert env == {"OMP_NUM_THREADS": "2"}
    job = manager.submit("ada", run_spec(seed=0))
    wait_until(lambda: manager.get(job).finished)
    time.sleep(0.1)
    assert len(measured) == 1  # not again: the run's own peaks held
    job = manager.submit("ada", run_spec(seed=1))
    wait_until(lambda: manager.get(job).finished)
    wait_until(lambda: len(measured) == 2)  # a run beat them: measured again once the worker is idle
    assert beaten_runs == [0, 1]


def test_without_the_budgets_test_no_peaks_are_measured(make_manager, monkeypatch):
    import server.jobs

    monkeypatch.setattr(server.jobs, "run_python_json", lambda *args, **kwargs: pytest.fail("measured peaks"))
    manager = make_manager(FakeRunner())
    job = manager.submit("ada", run_spec())
    wait_until(lambda: manager.get(job).finished)
