"""A learner's locked predictions are kept on the server: the same guess after a restart, per learner and question."""

from server.guesses import GuessStore
from server.history import HistoryStore


def test_guesses_are_kept_per_learner_and_question_and_can_be_taken_back(tmp_path):
    store = GuessStore(HistoryStore(tmp_path / "history.sqlite3"))
    store.lock("ada", "run-speedup", "How many times as fast?", 1.5)
    store.lock("ada", "memory-saving", "How much less memory?", None)  # skipped
    store.lock("bob", "run-speedup", "How many times as fast?", 0.8)
    store.lock("ada", "run-speedup", "How many times as fast?", 1.25)  # guessed again
    again = GuessStore(HistoryStore(tmp_path / "history.sqlite3"))
    assert again.get("ada", "run-speedup").value == 1.25 and again.get("ada", "memory-saving").value is None
    assert again.get("cy", "run-speedup") is None
    assert {learner: [g.question_key for g in own] for learner, own in again.everyone().items()} == {
        "ada": ["memory-saving", "run-speedup"], "bob": ["run-speedup"]}
    again.forget("ada", "run-speedup")
    assert again.get("ada", "run-speedup") is None


def test_a_guess_keeps_the_answer_the_page_revealed_in_the_pages_own_format(tmp_path):
    store = GuessStore(HistoryStore(tmp_path / "history.sqlite3"))
    store.lock("ada", "run-speedup", "How many times as fast?", 1.5, fmt="%.2fx")
    assert store.get("ada", "run-speedup").answer_shown == "not revealed yet"
    store.reveal("ada", "run-speedup", 1.3456)
    store.reveal("bob", "run-speedup", 2.0)  # no guess of bob's: nothing is written
    guess = store.get("ada", "run-speedup")
    assert (guess.guess_shown, guess.answer_shown) == ("1.50x", "1.35x") and guess.answered_at >= guess.locked_at
    store.lock("ada", "memory", "How much less?", None, fmt="%.0f%%")
    assert [g.guess_shown for g in store.of("ada")] == ["1.50x", "skipped"] and store.of("bob") == []


def test_a_guesses_table_from_before_answers_gains_them_and_keeps_its_rows(tmp_path):
    history = HistoryStore(tmp_path / "history.sqlite3")
    with history.connect() as db:  # the file as schema 3 left it, whose guesses table had no answers yet
        db.execute("DROP TABLE guesses")
        db.execute("CREATE TABLE guesses (learner_id TEXT NOT NULL, question_key TEXT NOT NULL, question TEXT NOT "
                   "NULL, value REAL, locked_at REAL NOT NULL, PRIMARY KEY (learner_id, question_key))")
        db.execute("INSERT INTO guesses VALUES ('ada', 'run-speedup', 'How many times as fast?', 1.5, 1.0)")
        db.execute("PRAGMA user_version = 3")
    history = HistoryStore(history.path)  # opening it upgrades it
    store = GuessStore(history)
    GuessStore(history)  # a second opener finds the columns there
    old = store.get("ada", "run-speedup")
    assert (old.value, old.fmt, old.answer, old.guess_shown) == (1.5, "%g", None, "1.5")
    store.reveal("ada", "run-speedup", 1.25)
    assert store.get("ada", "run-speedup").answer_shown == "1.25"
