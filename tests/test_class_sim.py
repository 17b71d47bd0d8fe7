import time

from test_server_jobs import ok_outcome

from bench.class_sim import RunLog, simulate
from server.devices import Slot


def slow_runner(config, on_spawn=None, **kwargs):
    on_spawn(1234)
    time.sleep(0.2)
    return ok_outcome(config)


def test_overlap_is_counted_from_the_runs_own_spans():
    log = RunLog(slow_runner)
    log.spans = [(0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (2.5, 2.6)]
    assert log.max_concurrent() == 3  # at 2.5: the second, third and fourth; the first ended at 2.0


def test_a_simulated_class_on_two_workers_finishes_with_two_runs_at_once(tmp_path):
    figures = simulate(3, slow_runner, [Slot("a"), Slot("b")], "local", str(tmp_path), timeout_s=30)
    assert {k: figures[k] for k in ("learners", "submitted", "finished", "failed", "lost", "duplicated")} == {
        "learners": 3, "submitted": 3, "finished": 3, "failed": 0, "lost": 0, "duplicated": 0,
    }
    assert figures["max_concurrent_runs"] == 2 and figures["workers"] == 2 and figures["makespan_s"] > 0.4
