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
