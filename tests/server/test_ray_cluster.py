"""The job manager on a Ray cluster of separate nodes on this machine (Ray's own `cluster_utils`, loopback only): the
workers follow GPU nodes that join and leave, and a node lost mid-run fails only its job.

The head is the app's node and has no GPU; every other node has one fake GPU (the runs use the CPU), so which node a
run is on is known. One story, so that the nodes and their Ray workers start once; every wait is bounded.
"""

import time

import pytest

pytest.importorskip("ray", reason="the Ray runner needs requirements-cluster.txt")

from server.jobs import JobManager
from server.ray_runner import LocalCluster, RayRunner, follow_cluster
from server.settings import Settings
from tests.server.test_ray_runner import Spy, gone, tiny

RESIZE_S = 0.2  # the workers follow the cluster's size this often here (RESIZE_EVERY_S in the app)
WAIT_S = 60.0


@pytest.fixture
def cluster():
    made = LocalCluster(gpus=0)
    first = made.add_node(gpus=1)  # before the driver connects, so the runner sees a GPU cluster
    runner = RayRunner.start(made.address)
    yield made, first, runner
    runner.close()
    made.shutdown()


@pytest.fixture
def manager(cluster, tmp_path):
    runner = cluster[2]
    settings = Settings(state_dir=str(tmp_path / "state"), data_root=str(tmp_path / "data"), max_epochs=1000)
    made = JobManager(settings, runner=Spy(runner), device_type="cpu", slots=runner.slots()).start()
    follow_cluster(made, runner.slots, every_s=RESIZE_S)
    yield made
    made.shutdown(wait=True, timeout=30)


def wait_until(predicate, timeout: float = WAIT_S) -> float:
    """Seconds until `predicate` held."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError("timed out waiting for the cluster or the job manager")
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.slow
def test_the_workers_follow_the_nodes_and_a_node_lost_mid_run_fails_only_its_job(cluster, manager):
    made, first, _ = cluster
    spy = manager._runner
    assert len(manager.slots) == 1
    long_job = manager.submit("a", tiny(1, epochs=1000, subset=1024))  # runs until its node goes
    wait_until(lambda: spy.pids and manager.get(long_job).progress is not None)
    long_pids = list(spy.pids)

    second = made.add_node(gpus=1)  # a node joins while a job runs: a second worker within a re-read or two
    assert wait_until(lambda: len(manager.slots) == 2, timeout=10) < 10 * RESIZE_S
    short_job = manager.submit("b", tiny(2))
    wait_until(lambda: manager.get(short_job).finished)
    assert manager.get(short_job).status == "done", manager.get(short_job).error

    made.remove_node(second)  # idle: the surplus worker leaves, the long job goes on
    wait_until(lambda: len(manager.slots) == 1, timeout=10)
    queued = manager.submit("c", tiny(3))
    assert manager.get(long_job).status == "running" and manager.get(queued).status == "queued"

    made.remove_node(first)  # mid-run: the job fails with the reason, its process ends, the queue goes on
    wait_until(lambda: manager.get(long_job).finished, timeout=30)
    view = manager.get(long_job)
    assert view.status == "failed" and "went down" in view.error, view.error
    wait_until(lambda: gone(long_pids), timeout=10)
    (long_start, long_end), (short_start, short_end) = sorted(spy.spans)  # the runs' own starts and ends
    assert long_start < short_start < short_end < long_end  # two runs at once, one on each node
    wait_until(lambda: manager.get(queued).status == "running", timeout=10)  # its task waits for a GPU node
    assert len(manager.slots) == 1  # no GPU left: one worker still, for the next node
    assert manager.cancel(queued, "c")
    wait_until(lambda: manager.get(queued).finished, timeout=15)
    assert manager.get(queued).status == "cancelled"
