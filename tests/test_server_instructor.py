import time

import pytest
from test_server_history import make_job

from server.history import HistoryStore
from server.instructor import FREE_TRIES, PasswordGate, class_results, comparisons_per_hour


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_right_password_opens_and_wrong_ones_slow_down():
    clock = FakeClock()
    gate = PasswordGate("correct horse battery", clock)
    for _ in range(FREE_TRIES):
        assert gate.check("guess") == (False, "wrong password")
    ok, message = gate.check("guess again")
    assert not ok and message == "wrong password; the next try is possible in 2 s"
    ok, message = gate.check("correct horse battery")  # even the right one must wait its turn
    assert not ok and message.startswith("too many wrong tries: wait")
    clock.now += 2.5
    assert gate.check("still wrong") == (False, "wrong password; the next try is possible in 4 s")
    clock.now += 4.5
    assert gate.check("correct horse battery") == (True, "")
    assert gate.check("wrong") == (False, "wrong password")  # a success starts the count again


def test_no_password_means_no_password_sign_in():
    gate = PasswordGate("")
    assert not gate.enabled and not gate.check("")[0]


@pytest.fixture
def store(tmp_path):
    return HistoryStore(tmp_path / "history.sqlite3")


def test_the_class_table_has_each_learners_latest_comparison(store):
    now = time.time()
    store.save_job(make_job("a1" * 16, session_id="ada", created_at=now - 300))
    store.save_job(make_job("a2" * 16, session_id="ada", created_at=now - 100))
    store.save_job(make_job("b1" * 16, session_id="bob", created_at=now - 200))
    store.save_job(make_job("c1" * 16, session_id="cy", status="failed", created_at=now))
    rows = class_results(store, {"ada": "Ada", "bob": "Bob"})
    assert [(r.learner, r.job_id) for r in rows] == [("Ada", "a2" * 16), ("Bob", "b1" * 16)]
    assert (rows[0].baseline, rows[0].candidate) == ("fp32", "amp-bf16")
    assert rows[0].speedup > 0 and rows[0].memory_figure != "-"


def test_capacity_comes_from_past_comparisons_and_the_workers(store):
    assert comparisons_per_hour(store, workers=1) is None
    job = make_job("d" * 32)
    job.started_at, job.finished_at = 1000.0, 1060.0  # a one-minute comparison
    store.save_job(job)
    assert comparisons_per_hour(store, workers=1) == pytest.approx(60.0)
    assert comparisons_per_hour(store, workers=8) == pytest.approx(480.0)
