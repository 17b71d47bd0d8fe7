"""Each learner's locked predictions ("how many times as fast will AMP train?"), kept with the learner in the
server's history file: a reload, a second tab or the next day shows the same locked guess, and the instructor's
roster sets it beside what the learner then measured."""

from __future__ import annotations

import time
from dataclasses import dataclass

from server.history import HistoryStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS guesses (
    learner_id TEXT NOT NULL,
    question_key TEXT NOT NULL,   -- which question ("run-speedup"), as the page names it
    question TEXT NOT NULL,       -- its wording when the guess was locked
    value REAL,                   -- NULL: the learner chose to see the answer without guessing
    locked_at REAL NOT NULL,
    PRIMARY KEY (learner_id, question_key)
);
"""


@dataclass(frozen=True)
class Guess:
    question_key: str
    question: str
    value: float | None  # None: skipped
    locked_at: float


class GuessStore:
    def __init__(self, history: HistoryStore):
        self._history = history
        with history.connect() as db:
            db.executescript(_SCHEMA)

    def lock(self, learner_id: str, question_key: str, question: str, value: float | None) -> Guess:
        guess = Guess(question_key, question, None if value is None else float(value), time.time())
        with self._history.connect() as db:
            db.execute("INSERT OR REPLACE INTO guesses (learner_id, question_key, question, value, locked_at) "
                       "VALUES (?, ?, ?, ?, ?)", (learner_id, question_key, question, guess.value, guess.locked_at))
        return guess

    def get(self, learner_id: str, question_key: str) -> Guess | None:
        with self._history.connect() as db:
            row = db.execute("SELECT question_key, question, value, locked_at FROM guesses WHERE learner_id = ? AND "
                             "question_key = ?", (learner_id, question_key)).fetchone()
        return Guess(*row) if row else None

    def forget(self, learner_id: str, question_key: str) -> None:
        with self._history.connect() as db:
            db.execute("DELETE FROM guesses WHERE learner_id = ? AND question_key = ?", (learner_id, question_key))

    def everyone(self) -> dict[str, list[Guess]]:
        """Every learner's locked guesses, by learner id, oldest first (the instructor's roster)."""
        found: dict[str, list[Guess]] = {}
        with self._history.connect() as db:
            for row in db.execute("SELECT learner_id, question_key, question, value, locked_at FROM guesses "
                                  "ORDER BY locked_at"):
                found.setdefault(row["learner_id"], []).append(Guess(*tuple(row)[1:]))
        return found
