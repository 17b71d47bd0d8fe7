"""The console's settings for the class in the history file: the message (set, kept across a restart, cleared; one
line, refused when empty or long), the kinds of job with the class's start, and a file from before they shared one
table."""

import json
import sqlite3
import time

import pytest

from server.console import KINDS, MAX_MESSAGE_CHARS, MESSAGE, ConsoleStore
from server.history import HistoryStore
from server.kinds import CLASS_MODE, KindPolicy, KindRule
from tests.server.test_history import make_job
from trainer.errors import ConfigError


@pytest.fixture
def store(tmp_path):
    return ConsoleStore(HistoryStore(tmp_path / "history.sqlite3"))


def test_a_message_is_kept_until_it_is_cleared(tmp_path):
    history = HistoryStore(tmp_path / "history.sqlite3")
    ConsoleStore(history).set_message("  The queue is paused\nfor 5 minutes ")
    again = ConsoleStore(HistoryStore(tmp_path / "history.sqlite3")).message()  # a restarted server
    assert again.text == "The queue is paused for 5 minutes" and again.set_at > 0
    ConsoleStore(history).clear(MESSAGE)
    assert ConsoleStore(history).message() is None


@pytest.mark.parametrize("text", ["", "   ", None, "x" * (MAX_MESSAGE_CHARS + 1)])
def test_an_empty_or_long_message_is_refused(tmp_path, text):
    with pytest.raises(ConfigError):
        ConsoleStore(HistoryStore(tmp_path / "history.sqlite3")).set_message(text)


def test_the_consoles_policy_is_kept_and_its_caps_count_from_a_new_class(store):
    assert store.kinds() is None
    first = store.set_kinds({"sweep": KindRule(True, 1), "comparison": KindRule(True, 3)})
    assert store.kinds().rule("sweep") == KindRule(True, 1) and store.kinds().rule("comparison").per_learner == 3
    assert store.kinds().rule("quick-demo") == KindRule()  # a kind the console left out: open
    assert store.set_kinds({"sweep": KindRule(False)}).since == first.since  # the same class: counts carry on
    assert store.set_kinds({}, restart_counts=True).since > first.since
    store.clear(KINDS)
    assert store.kinds() is None


def test_lowering_a_cap_never_restores_an_allowance(tmp_path):
    """Issue 33: with no console policy yet the caps count from the server's start, and the console's first save
    restarted every learner's counts; a learner who had had their comparisons could then run another."""
    history = HistoryStore(tmp_path / "history.sqlite3")
    started = time.time() - 60
    store = ConsoleStore(history, started_at=started)
    for n in range(2):
        history.save_job(make_job(f"{n}" * 32, learner_id="ada", created_at=started + 1 + n))

    def refusal(policy):
        return policy.refusal("comparison", history.count_jobs("ada", "comparison", policy.since))

    used_up = "this class allows 2 of its comparisons per learner, and you have had 2"
    assert refusal(KindPolicy.for_mode(True, store.class_start())) == used_up
    lowered = store.set_kinds({**CLASS_MODE, "comparison": KindRule(True, 1)})
    assert refusal(lowered) == "this class allows one of its comparisons per learner, and you have had 2"
    assert refusal(store.set_kinds(CLASS_MODE)) == used_up  # raised back: still had
    assert ConsoleStore(history).kinds().since == started  # a restarted server counts from the class's start too
    store.clear(KINDS)
    assert refusal(KindPolicy.for_mode(True, store.class_start())) == used_up  # back to the settings' mode: the same
    assert refusal(store.set_kinds(CLASS_MODE, restart_counts=True)) is None  # a new class: counts start again


# A history file as the server wrote it while each setting had a one-row table of its own.
OLD_TABLES = """
CREATE TABLE class_message (id INTEGER PRIMARY KEY CHECK (id = 1), text TEXT NOT NULL, set_at REAL NOT NULL);
CREATE TABLE presets (id INTEGER PRIMARY KEY CHECK (id = 1), query TEXT NOT NULL);
CREATE TABLE kind_policy (id INTEGER PRIMARY KEY CHECK (id = 1), rules TEXT NOT NULL, since REAL NOT NULL);
"""


def test_a_server_upgraded_from_three_tables_keeps_its_message_presets_and_kinds(tmp_path):
    path = tmp_path / "history.sqlite3"
    HistoryStore(path)
    with sqlite3.connect(path) as db:  # the file as schema 3 left it, before the console table
        db.execute("DROP TABLE console")
        db.execute("PRAGMA user_version = 3")
        db.executescript(OLD_TABLES)
        db.execute("INSERT INTO class_message VALUES (1, 'Back in 5 minutes', 1700000000.0)")
        db.execute("INSERT INTO presets VALUES (1, 'epochs=1&batch_size=128')")
        db.execute("INSERT INTO kind_policy VALUES (1, ?, 1700000100.0)",
                   (json.dumps({"sweep": {"enabled": True, "per_learner": 1}, "comparison": {"enabled": False,
                                                                                           "per_learner": None}}),))
    store = ConsoleStore(HistoryStore(path))
    assert (store.message().text, store.message().set_at) == ("Back in 5 minutes", 1700000000.0)
    assert store.presets() == {"epochs": "1", "batch_size": "128"}
    kinds = store.kinds()
    assert kinds.rule("sweep") == KindRule(True, 1) and not kinds.rule("comparison").enabled
    assert kinds.since == 1700000100.0 and kinds.name == "set in the console"
    store.set_message("A new message")
    again = ConsoleStore(HistoryStore(path))  # moved once: the next start finds the new message, not the old row
    assert again.message().text == "A new message" and again.presets() == {"epochs": "1", "batch_size": "128"}
    with sqlite3.connect(path) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"class_message", "presets", "kind_policy"}
