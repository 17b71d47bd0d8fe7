import time

import pytest

from bench.class_sim import RunLog, main, open_pages, simulate
from server.devices import Slot
from tests.server.test_jobs import ok_outcome


def slow_runner(config, on_spawn=None, **kwargs):
    on_spawn(1234)
    time.sleep(0.2)
    return ok_outcome(config)


def test_overlap_is_counted_from_the_runs_own_spans():
    log = RunLog(slow_runner)
    log.spans = [(0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (2.5, 2.6)]
    assert log.max_concurrent() == 3  # at 2.5: the second, third and fourth; the first ended at 2.0


@pytest.mark.slow
def test_a_simulated_class_on_two_workers_finishes_with_two_runs_at_once(tmp_path):
    figures = simulate(3, slow_runner, [Slot("a"), Slot("b")], "local", str(tmp_path), timeout_s=30)
    assert {k: figures[k] for k in ("learners", "submitted", "finished", "failed", "lost", "duplicated")} == {
        "learners": 3, "submitted": 3, "finished": 3, "failed": 0, "lost": 0, "duplicated": 0,
    }
    assert figures["max_concurrent_runs"] == 2 and figures["workers"] == 2 and figures["makespan_s"] > 0.4


@pytest.mark.slow
def test_the_simulated_workers_follow_the_cluster_as_in_the_app(tmp_path):
    figures = simulate(3, slow_runner, None, "ray", str(tmp_path), timeout_s=30,
                       cluster_slots=lambda: [Slot("ray 0"), Slot("ray 1")])
    assert (figures["finished"], figures["workers"], figures["max_concurrent_runs"]) == (3, 2, 2)


@pytest.mark.parametrize("argv", [["--nodes", "2"], ["--backend", "ray", "--nodes", "0"],
                                  ["--backend", "ray", "--nodes", "2", "--ray-address", "10.0.0.1:6379"]])
def test_nodes_is_only_for_a_local_ray_cluster(argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2


def test_open_pages_tick_against_the_queue_of_a_whole_class(tmp_path):
    figures = open_pages(5, 1.5, str(tmp_path))
    assert figures["learners"] == 5 and figures["ticks"] >= 5  # every page ticked at least once
    assert 0 < figures["tick_median_ms"] <= figures["tick_p99_ms"] <= figures["tick_max_ms"]


@pytest.mark.parametrize("argv", [["--pages", "5", "--backend", "ray"], ["--pages", "0"],
                                  ["--pages", "5", "--learners", "2001"]])
def test_pages_are_measured_on_the_local_workers_for_a_bounded_time(argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
