import sqlite3
import threading
import time
from dataclasses import replace

import pytest

from server.history import HistoryError, HistoryStore
from server.records import JobSpec, JobView
from server.state import SCHEMA_VERSION
from trainer.config import RunConfig
from trainer.errors import TrainerError
from trainer.isolated import RunOutcome
from trainer.progress import Progress
from trainer.results import RunResult


def make_result(config: RunConfig, images_per_s: float = 1000.0) -> RunResult:
    return RunResult(
        config=replace(config),
        environment={"device_type": "cpu"},
        total_time_s=2.0,
        epoch_times_s=[2.0],
        steady_images_per_s=images_per_s,
        peak_memory={"process_rss_growth": 1_000_000},
        loss_history=[{"step": 1, "epoch": 1, "loss": 2.3}, {"step": 2, "epoch": 1, "loss": 2.1}],
        test_accuracy=0.25,
        train_images=config.subset or 50_000,
    )


def make_job(
    job_id: str,
    precisions=("fp32", "amp-bf16"),
    status: str = "done",
    label: str = "",
    created_at: float | None = None,
    learner_id: str = "learner-a",
    kind: str = "compare",
) -> JobView:
    runs = [RunConfig(precision=p, epochs=1, subset=256, device="cpu") for p in precisions]
    finished = status == "done"
    outcomes = [RunOutcome(run, "ok", result=make_result(run)) for run in runs] if finished else []
    return JobView(
        id=job_id,
        learner_id=learner_id,
        kind=kind,
        label=label,
        status=status,
        queue_position=None,
        estimated_wait_s=None,
        current_run=len(runs) - 1,
        progress=Progress("training") if status == "running" else None,
        live_losses=[],
        outcomes=outcomes,
        error=None,
        spec=JobSpec(kind, runs, label),
        created_at=created_at if created_at is not None else time.time(),
        started_at=None,
        finished_at=time.time() if finished else None,
        extras={"device_type": "cpu", "run_wall_s": [5.0] * len(outcomes)},
    )


@pytest.fixture
def store(tmp_path):
    return HistoryStore(tmp_path / "state" / "history.sqlite3")


def test_creates_the_folder_and_uses_wal_mode(tmp_path):
    path = tmp_path / "deep" / "state" / "history.sqlite3"
    HistoryStore(path)
    assert path.exists()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_round_trip_keeps_spec_outcomes_and_results(store):
    job = make_job("a" * 32, label="my first compare")
    store.save_job(job)
    loaded = store.get_job(job.id)
    assert loaded.spec == job.spec
    assert loaded.status == "done" and loaded.label == "my first compare"
    assert [o.result.precision for o in loaded.outcomes] == ["fp32", "amp-bf16"]
    assert loaded.results[1].loss_history == job.outcomes[1].result.loss_history
    assert loaded.live_losses[0] == job.outcomes[0].result.loss_history
    assert loaded.extras == job.extras
    assert store.get_job("f" * 32) is None


def test_save_job_replaces_the_row(store):
    job = make_job("b" * 32, status="running")
    store.save_job(job)
    job.status, job.error = "failed", "run 1 of 2 (fp32): out of memory"
    store.save_job(job)
    assert len(store.list_jobs()) == 1
    assert store.get_job(job.id).error == "run 1 of 2 (fp32): out of memory"


def test_list_jobs_filters_and_orders_newest_first(store):
    now = time.time()
    store.save_job(make_job("1" * 32, ("fp32", "amp-bf16"), label="Baseline vs bf16", created_at=now - 30))
    store.save_job(make_job("2" * 32, ("fp32", "amp-fp16"), label="fp16 try", created_at=now - 20))
    store.save_job(make_job("3" * 32, ("fp32",), status="queued", kind="run", created_at=now - 10))
    assert [j.id[0] for j in store.list_jobs()] == ["3", "2", "1"]
    assert [j.id[0] for j in store.list_jobs(kind="compare")] == ["2", "1"]
    assert [j.id[0] for j in store.list_jobs(status="queued")] == ["3"]
    assert [j.id[0] for j in store.list_jobs(precision="amp-fp16")] == ["2"]
    assert [j.id[0] for j in store.list_jobs(precision="amp")] == []  # whole names only
    assert [j.id[0] for j in store.list_jobs(text="BASELINE")] == ["1"]
    assert [j.id[0] for j in store.list_jobs(text="%")] == []  # no wildcards from a learner
    assert [j.id[0] for j in store.list_jobs(limit=2)] == ["3", "2"]
    assert store.list_jobs(limit=-1) == []  # not SQLite's "no limit"
    assert store.list_jobs(learner_id="nobody") == []


def test_list_runs_returns_successful_runs_across_jobs(store):
    store.save_job(make_job("1" * 32, ("fp32", "amp-bf16")))
    store.save_job(make_job("2" * 32, ("fp32",), kind="run"))
    store.save_job(make_job("3" * 32, ("fp32", "amp-fp16"), status="running"))  # no outcomes yet
    runs = store.list_runs()
    assert sorted((job_id[0], index) for job_id, index, _ in runs) == [("1", 0), ("1", 1), ("2", 0)]
    assert all(isinstance(result, RunResult) for _, _, result in runs)
    assert [(job_id[0], index) for job_id, index, _ in store.list_runs(precision="amp-bf16")] == [("1", 1)]
    assert store.list_runs(device_type="cuda") == []
    timings = store.run_timings("cpu", "fp32", "dataloader", 1)
    assert len(timings) == 2 and timings[0].wall_s == 5.0 and timings[0].train_images == 256


def test_unfinished_jobs_are_the_waiting_and_running_ones_in_submission_order(store):
    store.save_job(make_job("1" * 32, status="done", created_at=1.0))
    store.save_job(make_job("3" * 32, status="queued", created_at=3.0))
    store.save_job(make_job("2" * 32, status="running", created_at=2.0))
    assert [(job.id[0], job.status) for job in store.unfinished_jobs()] == [("2", "running"), ("3", "queued")]


def test_concurrent_writers_from_threads_lose_nothing(tmp_path):
    path = tmp_path / "history.sqlite3"
    errors = []

    def writer(thread_index: int) -> None:
        try:
            own_store = HistoryStore(path)  # each thread its own store, as separate processes would
            for n in range(10):
                job = make_job(f"{thread_index:02d}{n:030d}", status="running")
                own_store.save_job(job)
                job.status = "done"
                own_store.save_job(job)
        except Exception as exc:  # surfaced below; a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    jobs = HistoryStore(path).list_jobs()
    assert len(jobs) == 60 and {j.status for j in jobs} == {"done"}


def test_a_damaged_row_hides_only_itself(store):
    store.save_job(make_job("1" * 32))
    store.save_job(make_job("2" * 32))
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE jobs SET spec = '{not json' WHERE id = ?", ("2" * 32,))
    assert [j.id for j in store.list_jobs()] == ["1" * 32]
    with pytest.raises(HistoryError, match="damaged"):
        store.get_job("2" * 32)


def test_a_damaged_run_row_hides_only_itself_from_the_runs_offered(store):
    store.save_job(make_job("1" * 32))
    store.save_job(make_job("2" * 32))
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET result = '{not json' WHERE job_id = ? AND run_index = 0", ("2" * 32,))
        db.execute("UPDATE runs SET result = '[]' WHERE job_id = ? AND run_index = 1", ("1" * 32,))
    assert sorted((job, index) for job, index, _ in store.list_runs()) == [("1" * 32, 0), ("2" * 32, 1)]


def test_a_corrupt_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(HistoryError) as caught:
        HistoryStore(path)
    assert isinstance(caught.value, TrainerError)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_an_unusable_state_folder_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the state folder should be")
    with pytest.raises(HistoryError, match="AMP_LAB_STATE_DIR"):
        HistoryStore(blocker / "history.sqlite3")


def test_a_history_file_of_the_first_schema_is_migrated_in_place_and_keeps_its_jobs(tmp_path):
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    store.save_job(make_job("1" * 32, learner_id="learner-a"))
    store.save_job(make_job("2" * 32, learner_id="learner-b", status="queued"))
    with sqlite3.connect(path) as db:  # turn it back into schema 1, which named a job's owner a session
        db.execute("ALTER TABLE jobs RENAME COLUMN learner_id TO session_id")
        db.execute("DROP INDEX jobs_by_learner")
        db.execute("CREATE INDEX jobs_by_session ON jobs (session_id)")
        db.execute("PRAGMA user_version = 1")
    migrated = HistoryStore(path)
    assert [job.id for job in migrated.list_jobs(learner_id="learner-a")] == ["1" * 32]
    assert migrated.get_job("2" * 32).learner_id == "learner-b"
    assert len(migrated.get_job("1" * 32).results) == 2
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert "learner_id" in columns and "session_id" not in columns
    assert "jobs_by_learner" in indexes and "jobs_by_session" not in indexes
    HistoryStore(path)  # opening a migrated file again changes nothing


def test_many_stores_opening_a_new_history_file_at_once_all_succeed(tmp_path):
    path, errors = tmp_path / "history.sqlite3", []

    def open_and_save(index: int) -> None:
        try:
            HistoryStore(path).save_job(make_job(f"{index:032d}"))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_save, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(HistoryStore(path).list_jobs()) == 12
