import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lessons.verdicts import class_row
from server.estimate import coarse_run_seconds
from server.history import HistoryStore
from server.instructor import (
    FREE_TRIES,
    InstructorPass,
    PasswordGate,
    capacity_at,
    comparisons_per_hour,
    latest_comparisons,
)
from server.records import JobSpec
from tests.server.test_history import make_job
from trainer.config import RunConfig
from trainer.isolated import RunOutcome
from trainer.results import RunResult


def class_results(store, names):
    """The console's rows: each learner's latest comparison (the server's), judged by lessons/verdicts."""
    return [class_row(names.get(job.learner_id, "a learner"), job.finished_at, job.id, job.results)
            for job in latest_comparisons(store)]


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
    store.save_job(make_job("a1" * 16, learner_id="ada", created_at=now - 300))
    store.save_job(make_job("a2" * 16, learner_id="ada", created_at=now - 100))
    store.save_job(make_job("b1" * 16, learner_id="bob", created_at=now - 200))
    store.save_job(make_job("c1" * 16, learner_id="cy", status="failed", created_at=now))
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


def test_capacity_at_the_starting_settings_is_the_coarse_estimate_until_the_server_has_run_those_modes(store):
    lab = [RunConfig(precision=p, epochs=5, batch_size=256, data="synthetic", loader="resident", device="cpu")
           for p in ("fp32", "amp-bf16")]
    spec = JobSpec("compare", lab)
    fresh = capacity_at(spec, store, "cpu", workers=2)
    coarse_s = sum(coarse_run_seconds(run, "cpu") for run in lab)
    assert not fresh.from_history and fresh.comparison_s == pytest.approx(coarse_s)
    assert fresh.learners_per_hour == pytest.approx(2 * 3600 / coarse_s)
    # Tiny comparisons in the history: their own time says nothing of a 5-epoch comparison, their throughput does.
    job = make_job("t" * 32)
    for outcome in job.outcomes:
        outcome.result.config = replace(outcome.result.config, loader="resident", batch_size=256, subset=2048)
        outcome.result.steady_images_per_s, outcome.result.total_time_s = 1000.0, 2.0
    job.started_at, job.finished_at = 1000.0, 1010.0
    store.save_job(job)
    measured = capacity_at(spec, store, "cpu", workers=2)
    assert measured.from_history
    assert measured.comparison_s > 2 * 5 * 50_000 / 1000.0  # both runs' five epochs at 1,000 images/s, and start-up
    assert comparisons_per_hour(store, workers=2) == pytest.approx(720.0)  # as the tiny ones ran: 10 s each
    assert capacity_at(spec, store, "tpu", workers=1) is None


def test_a_repeated_comparison_gives_the_median_speedup_its_range_and_the_median_pairs_figures(store):
    """Three real alternating pairs from `compare --repeats 3` (tests/recorded/), the median pair last here."""
    recorded = json.loads((Path(__file__).parents[1] / "recorded" / "repeated_compare_cpu.json").read_text())
    results = [RunResult.from_dict(run) for run in recorded["runs"]]
    results = results[2:] + results[:2]  # the recording's median pair came first; here it is the third
    job = make_job("r" * 32, precisions=[r.precision for r in results], learner_id="ada")
    job.outcomes = [RunOutcome(r.config, "ok", result=r) for r in results]
    store.save_job(job)
    (row,) = class_results(store, {"ada": "Ada"})
    speedup = recorded["speedup"]  # what the command line computed from these runs
    assert (row.speedup, row.speedup_low, row.speedup_high, row.pairs) == pytest.approx(
        (speedup["median"], speedup["low"], speedup["high"], 3))
    median_fp32, median_amp = results[4:]
    assert row.speedup == pytest.approx(median_fp32.total_time_s / median_amp.total_time_s)
    assert (row.baseline_accuracy, row.candidate_accuracy) == (median_fp32.test_accuracy, median_amp.test_accuracy)
    assert row.speedup != pytest.approx(results[0].total_time_s / results[1].total_time_s)  # not the first pair's


def test_one_pair_has_no_range_in_the_class_table(store):
    store.save_job(make_job("p" * 32, learner_id="bob"))
    (row,) = class_results(store, {"bob": "Bob"})
    assert row.pairs == 1 and row.speedup_low is None and row.speedup_high is None


def test_wrong_tries_slow_down_only_the_browser_or_address_they_come_from():
    clock = FakeClock()
    gate = PasswordGate("correct horse battery", clock=lambda: clock.now)
    for _ in range(FREE_TRIES + 1):
        gate.check("guess", who="10.0.0.7")
    assert gate.check("correct horse battery", who="10.0.0.7")[1].startswith("too many wrong tries: wait")
    assert gate.check("correct horse battery", who="10.0.0.1") == (True, "")  # the instructor is not held back


def test_the_instructors_pass_is_signed_expires_and_cannot_be_forged(store):
    clock = FakeClock()
    signer = InstructorPass(store, clock=lambda: clock.now)
    token = signer.issue(hours=1)
    assert signer.holds(token)
    assert InstructorPass(store, clock=lambda: clock.now).holds(token)  # a restarted server keeps its secret
    expiry, signature = token.split(".")
    assert not signer.holds(f"{int(expiry) + 3600}.{signature}")  # a later expiry needs the server's secret
    assert not signer.holds(f"{expiry}.{'0' * 64}") and not signer.holds("") and not signer.holds(None)
    clock.now += 3601
    assert not signer.holds(token)
    other = HistoryStore(store.path.parent / "other.sqlite3")
    assert not InstructorPass(other, clock=lambda: 0.0).holds(token)  # another server's secret
