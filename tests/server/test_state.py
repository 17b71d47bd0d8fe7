import sqlite3
from pathlib import Path

import pytest

from server import state
from server.console import ConsoleStore
from server.guesses import GuessStore
from server.history import HistoryError, HistoryStore
from server.identity import LearnerStore
from server.instructor import InstructorPass
from server.kinds import KindRule
from tests.server.test_history import make_job

OLD_STATES = Path(__file__).parent / "old_states"


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
    assert file_state(other) == before


def test_a_new_file_is_marked_as_amp_labs_at_the_current_schema(tmp_path):
    path = tmp_path / "history.sqlite3"
    HistoryStore(path)
    assert rows(path, "PRAGMA user_version") == [(state.SCHEMA_VERSION,)]
    assert rows(path, "PRAGMA application_id") == [(state.APPLICATION_ID,)]
    assert not (tmp_path / state.BACKUPS).exists()  # nothing to keep before creating a file
