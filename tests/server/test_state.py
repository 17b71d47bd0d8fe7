import json
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path

import pytest

from server import state
from server.console import ConsoleStore
from server.guesses import GuessStore
from server.history import HistoryError, HistoryStore
from server.identity import LearnerStore
from server.instructor import InstructorPass
from server.jobs import JobManager
from server.kinds import KindRule
from server.settings import Settings
from tests.server.test_history import make_job, make_result
from tests.server.test_jobs import WAIT_S, compare_spec, wait_until
from trainer.isolated import RunOutcome
from trainer.progress import Progress

OLD_STATES = Path(__file__).parent / "old_states"
REPO = Path(__file__).resolve().parents[2]


def old_state(tmp_path: Path, fixture: str) -> Path:
    """A state folder holding the history file an old release wrote (old_states/make_old_state.py)."""
    path = tmp_path / "state" / "history.sqlite3"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:
        db.executescript((OLD_STATES / fixture).read_text())
    return path


def rows(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


def file_state(path: Path) -> tuple:
    """Everything that opening a file could change: its bytes and the files beside it."""
    return path.read_bytes(), sorted(p.name for p in path.parent.rglob("*"))


def run_cli(*args: str, state_dir: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "AMP_LAB_STATE_DIR": str(state_dir)}
    return subprocess.run([sys.executable, "-m", "server.state", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("fixture", ["schema1-ca1c5c7.sql", "schema3-00404e7.sql"])
def test_a_state_from_an_old_release_is_upgraded_once_after_a_copy_and_keeps_every_record(tmp_path, fixture):
    path = old_state(tmp_path, fixture)
    old_version = rows(path, "PRAGMA user_version")[0][0]
    owner = "session_id" if old_version == 1 else "learner_id"
    jobs = rows(path, f"SELECT id, {owner}, status, label FROM jobs ORDER BY id")
    results = rows(path, "SELECT job_id, run_index, total_time_s, json_extract(result, '$.test_accuracy') FROM runs "
                         "ORDER BY job_id, run_index")
    learners = rows(path, "SELECT id, display_name FROM learners ORDER BY id") if old_version > 1 else []
    guesses = rows(path, "SELECT learner_id, question_key, value FROM guesses ORDER BY 1, 2") if learners else []
    secret = rows(path, "SELECT secret FROM server_secret") if learners else []
    assert jobs and results and (old_version == 1 or (learners and guesses and secret))

    history = HistoryStore(path)

    assert [(j.id, j.learner_id, j.status, j.label) for j in sorted(history.list_jobs(), key=lambda j: j.id)] == jobs
    for job_id, _, status, _ in jobs:
        job = history.get_job(job_id)
        stored = [r for r in results if r[0] == job_id]
        assert [(job_id, i, r.total_time_s, r.test_accuracy) for i, r in enumerate(job.results)] == stored
        assert (status == "done") == bool(stored)
    assert sorted((job_id, i, r.total_time_s, r.test_accuracy) for job_id, i, r in history.list_runs()) == results
    assert sorted(LearnerStore(history).names().items()) == learners
    everyone = GuessStore(history).everyone()
    assert sorted((who, g.question_key, g.value) for who, mine in everyone.items() for g in mine) == guesses
    if old_version == 3:  # its console settings were one-row tables then
        console = ConsoleStore(history)
        assert console.message().text == "Back in 5 minutes" and console.presets() == {"epochs": "1",
                                                                                       "batch_size": "128"}
        assert console.kinds().rule("sweep") == KindRule(True, 1)
        InstructorPass(history)
        assert rows(path, "SELECT secret FROM server_secret") == secret  # the instructor's passes stay valid
    assert rows(path, "PRAGMA user_version") == [(state.SCHEMA_VERSION,)]

    (kept,) = (path.parent / state.BACKUPS).iterdir()  # the file as it was, copied before the upgrade
    assert kept.name.startswith(f"history-schema{old_version}-before-upgrade-")
    assert rows(kept, "PRAGMA user_version") == [(old_version,)]
    assert rows(kept, f"SELECT id, {owner}, status, label FROM jobs ORDER BY id") == jobs
    before = file_state(path)
    HistoryStore(path)  # once: a second opening copies and changes nothing
    assert file_state(path) == before


def test_a_state_from_a_newer_release_is_refused_in_one_line_and_left_as_it_is(tmp_path):
    path = tmp_path / "state" / "history.sqlite3"
    HistoryStore(path).save_job(make_job("1" * 32))
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {state.SCHEMA_VERSION + 1}")
    before = file_state(path)
    with pytest.raises(HistoryError) as caught:
        HistoryStore(path)
    message = str(caught.value)
    assert "\n" not in message and f"newer AMP Lab (schema {state.SCHEMA_VERSION + 1}; this one reads up to " \
                                   f"{state.SCHEMA_VERSION})" in message and str(path) in message
    assert file_state(path) == before


def test_another_applications_database_is_refused_and_left_as_it_is(tmp_path):
    path = tmp_path / "places" / "history.sqlite3"
    path.parent.mkdir()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        db.execute("INSERT INTO moz_places (url) VALUES ('https://example.org')")
    before = file_state(path)
    with pytest.raises(HistoryError, match="is not an AMP Lab history .*moz_places"):
        HistoryStore(path)
    assert file_state(path) == before
    other = tmp_path / "other" / "history.sqlite3"
    other.parent.mkdir()
    with sqlite3.connect(other) as db:
        db.execute("PRAGMA application_id = 1234")
    before = file_state(other)
    with pytest.raises(HistoryError, match="belongs to another application"):
        HistoryStore(other)
    with pytest.raises(HistoryError, match="belongs to another application"):
        state.restore(other, tmp_path / "live" / "history.sqlite3")
    assert file_state(other) == before and not (tmp_path / "live").exists()


def test_a_new_file_is_marked_as_amp_labs_at_the_current_schema(tmp_path):
    path = tmp_path / "history.sqlite3"
    HistoryStore(path)
    assert rows(path, "PRAGMA user_version") == [(state.SCHEMA_VERSION,)]
    assert rows(path, "PRAGMA application_id") == [(state.APPLICATION_ID,)]
    assert not (tmp_path / state.BACKUPS).exists()  # nothing to keep before creating a file


def a_running_job(tmp_path: Path) -> tuple[JobManager, threading.Event]:
    """A job manager whose runner finishes a job at once, except a job of seed 9, which reports progress until the
    returned event is set."""
    release = threading.Event()

    def runner(config, on_progress=None, should_cancel=None, on_spawn=None, env=None):
        on_spawn(4242)
        while config.seed == 9 and not release.wait(0.05):
            on_progress(Progress("training", 1, 1, 1, 4, 1, 4, loss=2.5, images_per_s=900.0, eta_s=1.0))
        return RunOutcome(config, "ok", result=make_result(config))

    settings = Settings(state_dir=str(tmp_path / "state"), data_root=str(tmp_path / "data"), class_mode=False,
                        max_queued_per_learner=10)
    return JobManager(settings, runner=runner, device_type="cpu").start(), release


def test_a_backup_taken_while_a_job_runs_restores_every_finished_job_and_passes_the_integrity_check(tmp_path):
    manager, release = a_running_job(tmp_path)
    try:
        finished = [manager.submit(f"learner-{i}", compare_spec(seed=i)) for i in range(5)]
        wait_until(lambda: all(manager.get(job).status == "done" for job in finished))
        running = manager.submit("learner-9", compare_spec(seed=9))
        wait_until(lambda: manager.get(running).status == "running")
        learners, stop = LearnerStore(manager.store), threading.Event()
        signing_in = threading.Thread(target=lambda: [learners.create() for _ in iter(stop.is_set, True)])
        signing_in.start()  # a class arriving while the copy is made: writes all along
        try:
            done = run_cli("backup", str(tmp_path / "copies") + "/", state_dir=tmp_path / "state")
        finally:
            stop.set()
            signing_in.join()
        assert manager.get(running).status == "running"  # the copy was taken while the job ran
        release.set()
        wait_until(lambda: manager.get(running).status == "done")
    finally:
        release.set()
        manager.shutdown(wait=True, timeout=WAIT_S)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    (copy,) = (tmp_path / "copies").iterdir()
    assert done.stdout.startswith(f"backed up {tmp_path / 'state' / 'history.sqlite3'} to {copy} (schema 4: 6 jobs, "
                                  "10 results, ") and done.stdout.count("\n") == 1

    put_back = run_cli("restore", str(copy), state_dir=tmp_path / "restored")
    assert put_back.returncode == 0 and put_back.stdout.startswith(f"restored {copy} into "), put_back.stderr
    restored = HistoryStore(tmp_path / "restored" / "history.sqlite3")
    assert rows(restored.path, "PRAGMA integrity_check") == [("ok",)]
    for job in finished:
        view = restored.get_job(job)
        assert view.status == "done" and [r.precision for r in view.results] == ["fp32", "amp-bf16"]
    assert restored.get_job(running).status == "running"  # as it was when copied: a restarted server runs it again


@pytest.mark.parametrize("damage", ["truncated", "overwritten", "index out of step", "not sqlite", "empty", "missing"])
def test_a_damaged_copy_is_refused_in_one_line_and_the_state_is_left_as_it_is(tmp_path, damage):
    live = tmp_path / "state" / "history.sqlite3"
    HistoryStore(live).save_job(make_job("1" * 32))
    copy = tmp_path / "copy.sqlite3"
    state.backup(live, copy)
    data = copy.read_bytes()
    if damage == "truncated":
        copy.write_bytes(data[: len(data) // 2])
    elif damage == "overwritten":  # every page after the first (the schema's) filled with noise
        copy.write_bytes(data[:4096] + bytes((i * 7) % 251 for i in range(len(data) - 4096)))
    elif damage == "index out of step":  # readable, but SQLite's integrity check finds rows its index lacks
        with closing(sqlite3.connect(copy)) as db:
            db.execute("PRAGMA writable_schema = ON")
            db.execute("UPDATE sqlite_master SET sql = 'CREATE INDEX jobs_by_created ON jobs (finished_at)' "
                       "WHERE name = 'jobs_by_created'")
            db.commit()
    elif damage == "not sqlite":
        copy.write_text("job,status\n1,done\n")
    elif damage == "empty":
        copy.write_bytes(b"")
    else:
        copy.unlink()
    before = file_state(live)
    done = run_cli("restore", str(copy), state_dir=live.parent)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"amp-lab state: {copy} "), done.stderr
    assert file_state(live) == before and not (live.parent / state.BACKUPS).exists()


def test_a_restore_keeps_the_state_it_replaces_and_an_older_copy_is_upgraded_when_opened(tmp_path):
    old = old_state(tmp_path / "old", "schema3-00404e7.sql")
    live = tmp_path / "state" / "history.sqlite3"
    HistoryStore(live).save_job(make_job("1" * 32))
    restored, kept = state.restore(old, live)
    assert (restored.version, restored.jobs, restored.results, restored.learners, restored.guesses) == (3, 3, 3, 3, 3)
    assert kept.parent == live.parent / state.BACKUPS and rows(kept, "SELECT id FROM jobs") == [("1" * 32,)]
    assert len(HistoryStore(live).list_jobs()) == 3  # upgraded on opening, after its own copy
    assert len(list(kept.parent.glob("history-schema3-before-upgrade-*.sqlite3"))) == 1


def test_a_restore_over_a_damaged_state_moves_the_damaged_file_aside_as_it_is(tmp_path):
    live = tmp_path / "state" / "history.sqlite3"
    HistoryStore(live).save_job(make_job("1" * 32))
    good, _ = state.backup(live, tmp_path / "good.sqlite3")
    live.write_bytes(b"a disk that failed" * 500)
    Path(f"{live}-wal").unlink(missing_ok=True)
    restored, kept = state.restore(good, live)
    assert kept.read_bytes() == b"a disk that failed" * 500
    assert [job.id for job in HistoryStore(live).list_jobs()] == ["1" * 32] and restored.jobs == 1


def test_backup_into_a_folder_names_a_dated_copy_and_a_missing_state_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path / "state"))
    assert state.main(["backup"]) == 1
    assert capsys.readouterr().err == (f"amp-lab state: there is no history file at {tmp_path}/state/history.sqlite3: "
                                       "set AMP_LAB_STATE_DIR to the app's state folder\n")
    HistoryStore(tmp_path / "state" / "history.sqlite3").save_job(make_job("1" * 32))
    assert state.main(["backup"]) == 0 and state.main(["backup"]) == 0  # twice in one second: two files
    copies = sorted((tmp_path / "state" / state.BACKUPS).iterdir())
    assert len(copies) == 2 and all(c.name.startswith("history-") and c.suffix == ".sqlite3" for c in copies)
    assert [json.loads(r[0])["kind"] for c in copies for r in rows(c, "SELECT spec FROM jobs")] == ["compare"] * 2
    assert rows(copies[0], "PRAGMA journal_mode") == [("delete",)]  # one file, no -wal beside it
