"""The Ray runner on a local, loopback-only Ray with two fake GPUs (runs on the CPU), started once for the module;
and the job manager's workers following a cluster (follow_cluster), on a stand-in cluster."""

import os
import signal
import threading
import time
from dataclasses import replace

import psutil
import pytest

pytest.importorskip("ray", reason="the Ray runner needs requirements-cluster.txt")

from server.devices import Slot
from server.jobs import JobManager
from server.ray_runner import RayRunner, follow_cluster
from server.records import JobSpec
from server.settings import Settings
from tests.server.test_jobs import FakeRunner, make_manager, run_spec, settings  # noqa: F401 (fixtures)
from trainer.config import RunConfig

WAIT_S = 120.0


@pytest.fixture(scope="module")
def ray_runner():
    runner = RayRunner.start(None, fake_gpus=2)
    yield runner
    runner.close()


@pytest.fixture
def manager(ray_runner, tmp_path):
    settings = Settings(state_dir=str(tmp_path / "state"), data_root=str(tmp_path / "data"), max_queued_per_learner=4)
    made = JobManager(settings, runner=Spy(ray_runner), device_type="cpu", slots=ray_runner.slots()).start()
    yield made
    made.shutdown(wait=True, timeout=30)


class Spy:
    """Passes runs to the Ray runner and keeps each run's pid and its start and end."""

    def __init__(self, runner):
        self.runner = runner
        self.pids: list[int] = []
        self.spans: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    def __call__(self, config, on_spawn=None, **kwargs):
        started = []

        def spawned(pid):
            started.append(time.monotonic())
            with self.lock:
                self.pids.append(pid)
            on_spawn(pid)

        try:
            return self.runner(config, on_spawn=spawned, **kwargs)
        finally:
            if started:
                with self.lock:
                    self.spans.append((started[0], time.monotonic()))


def wait_until(predicate, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the job manager")
        time.sleep(0.05)


def tiny(seed: int, **overrides) -> JobSpec:
    values = {"epochs": 1, "batch_size": 64, "data": "synthetic", "loader": "resident", "subset": 128,
              "test_subset": 64, "num_workers": 0, "log_every": 1, "seed": seed, **overrides}
    return JobSpec("run", [RunConfig(**values)])


def long_with_a_worker(seed: int) -> JobSpec:
    """Long enough to be cancelled mid-run, with a DataLoader worker process under the training process."""
    return tiny(seed, epochs=20, subset=4096, loader="dataloader", num_workers=1)


def gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def group_of(pid: int) -> list[int]:
    process = psutil.Process(pid)
    return [pid] + [child.pid for child in process.children(recursive=True)]


@pytest.mark.slow
def test_two_fake_gpus_run_two_jobs_at_once_and_stream_progress(manager, ray_runner):
    assert (ray_runner.gpus, len(manager.slots)) == (2, 2)
    ids = [manager.submit(f"s{n}", tiny(n)) for n in range(3)]
    wait_until(lambda: all(manager.get(i).finished for i in ids))
    views = [manager.get(i) for i in ids]
    assert [v.status for v in views] == ["done"] * 3, [v.error for v in views]
    assert all(v.live_losses and v.live_losses[0] for v in views)  # progress came back while each ran
    spans = sorted(manager._runner.spans)
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most == 2  # never more runs than fake GPUs, and both used


@pytest.mark.slow
def test_cancel_ends_the_training_process_and_its_children_within_5_s(manager):
    job = manager.submit("a", long_with_a_worker(1))
    spy = manager._runner
    wait_until(lambda: spy.pids and (manager.get(job).progress is not None))
    wait_until(lambda: len(group_of(spy.pids[0])) > 1, timeout=30)  # the DataLoader worker is up
    pids = group_of(spy.pids[0])
    assert manager.cancel(job, "a")
    cancelled = time.monotonic()
    wait_until(lambda: gone(pids), timeout=10)
    assert time.monotonic() - cancelled < 5.0
    wait_until(lambda: manager.get(job).finished, timeout=30)
    assert manager.get(job).status == "cancelled"


@pytest.mark.slow
def test_a_killed_ray_worker_fails_its_job_with_the_reason_and_the_next_job_runs(manager):
    doomed = manager.submit("a", long_with_a_worker(2))
    spy = manager._runner
    wait_until(lambda: spy.pids and manager.get(doomed).progress is not None)
    training = spy.pids[0]
    pids = group_of(training)
    ray_worker = psutil.Process(training).ppid()
    os.kill(ray_worker, signal.SIGKILL)
    wait_until(lambda: manager.get(doomed).finished, timeout=60)
    view = manager.get(doomed)
    assert view.status == "failed" and "Ray worker" in view.error, view.error
    wait_until(lambda: gone(pids), timeout=5)  # the run noticed its parent was gone
    after = manager.submit("b", tiny(3))
    wait_until(lambda: manager.get(after).finished)
    assert manager.get(after).status == "done", manager.get(after).error


# ---- following the cluster ---------------------------------------------------------------------------------

class FakeCluster:
    """Stands in for RayRunner.slots: one slot per GPU the cluster has now; None makes it fail to answer."""

    def __init__(self, gpus: int | None):
        self.gpus = gpus
        self.asked = 0

    def __call__(self) -> list[Slot]:
        self.asked += 1
        if self.gpus is None:
            raise ConnectionError("the cluster did not answer")
        return [Slot(f"ray {n}") for n in range(self.gpus)]


def test_the_workers_follow_the_cluster_and_a_leaving_node_lets_its_job_finish(make_manager):
    runner, cluster = FakeRunner(gated=True), FakeCluster(1)
    manager = make_manager(runner, slots=cluster())
    follow_cluster(manager, cluster, every_s=0.01)
    ids = [manager.submit(f"s{n}", run_spec(seed=n)) for n in range(4)]
    wait_until(lambda: runner.active == 1)
    cluster.gpus = 2  # a node joins: its worker takes the next job without waiting for the first to end
    wait_until(lambda: runner.active == 2)
    assert len(manager.slots) == 2 and manager.queue_length() == 2
    cluster.gpus = 1  # a node leaves while both run: nothing is stopped, the surplus worker ends after its job
    wait_until(lambda: len(manager.slots) == 1)
    time.sleep(0.05)
    assert runner.active == 2 and [manager.get(i).status for i in ids[:2]] == ["running", "running"]
    runner.release.set()
    wait_until(lambda: all(manager.get(i).finished for i in ids))
    assert [manager.get(i).status for i in ids] == ["done"] * 4

    runner.release.clear()
    later = [manager.submit(f"t{n}", run_spec(seed=10 + n)) for n in range(2)]
    wait_until(lambda: runner.active == 1)
    time.sleep(0.05)  # a second worker left over would start the other job now
    assert runner.active == 1 and manager.queue_length() == 1
    cluster.gpus = 2  # the node comes back
    wait_until(lambda: runner.active == 2)
    runner.release.set()
    wait_until(lambda: all(manager.get(i).finished for i in later))


def test_a_cluster_with_no_node_left_queues_jobs_until_one_joins(make_manager):
    runner, cluster = FakeRunner(), FakeCluster(0)
    manager = make_manager(runner, slots=cluster())
    follow_cluster(manager, cluster, every_s=0.01)
    first, second = manager.submit("a", run_spec(1)), manager.submit("b", run_spec(2))  # no worker: still queued
    assert [manager.get(i).queue_position for i in (first, second)] == [1, 2]
    assert manager.get(second).estimated_wait_s is None and manager.wait_for_new_job()[1] is None
    assert not runner.calls
    cluster.gpus = 1
    wait_until(lambda: manager.get(second).finished)
    assert [manager.get(i).status for i in (first, second)] == ["done", "done"]


def test_a_cluster_that_does_not_answer_keeps_the_workers_it_had(make_manager):
    cluster = FakeCluster(2)
    manager = make_manager(FakeRunner(), slots=cluster())
    follow_cluster(manager, cluster, every_s=0.01)
    cluster.gpus = None
    asked = cluster.asked
    wait_until(lambda: cluster.asked > asked + 2)
    assert len(manager.slots) == 2
    job = manager.submit("a", run_spec())
    wait_until(lambda: manager.get(job).finished)
    assert manager.get(job).status == "done"


class FakeRayRunner(FakeRunner):
    """Stands in for RayRunner.start's runner: a CPU cluster whose slots are `cluster`'s."""

    device_type = "cpu"

    def __init__(self, cluster: FakeCluster):
        super().__init__()
        self.slots = cluster


def test_given_slots_are_fixed_even_with_a_cluster(make_manager, settings, monkeypatch):
    cluster = FakeCluster(3)
    monkeypatch.setattr(RayRunner, "start", lambda address: FakeRayRunner(cluster))
    on_a_cluster = replace(settings, ray_address="10.0.0.1:6379")
    manager = make_manager(None, on_a_cluster, slots=[Slot("ray 0")])
    time.sleep(0.05)
    assert cluster.asked == 0 and len(manager.slots) == 1
    assert len(make_manager(None, on_a_cluster).slots) == 3  # without given slots it joins with the cluster's
