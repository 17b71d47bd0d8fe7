"""Each learner's locked predictions ("how many times as fast will AMP train?"), kept with the learner in the
server's history file: a reload, a second tab or the next day shows the same locked guess, and the instructor's
roster and the learner's lab report set it beside the answer the page revealed for it (recorded when it was
shown: a measured speedup, a count of underflowing gradients)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from server.history import HistoryStore

_COLUMNS = "question_key, question, value, locked_at, fmt, answer, answered_at, answered_by"


@dataclass(frozen=True)
class Guess:
    question_key: str
    question: str
    value: float | None  # None: skipped
    locked_at: float
    fmt: str = "%g"
    answer: float | None = None  # what the page revealed for it (None: not yet)
    answered_at: float | None = None
    answered_by: str | None = None  # where the answer was measured, in words (None: a page that did not say)

    @property
    def guess_shown(self) -> str:
        """The guess as the page showed it ("1.50x"), or "skipped"."""
        return "skipped" if self.value is None else self._formatted(self.value)

    @property
    def answer_shown(self) -> str:
        """The revealed answer as the page showed it, or "not revealed yet"."""
        return "not revealed yet" if self.answer is None else self._formatted(self.answer)

    def _formatted(self, value: float) -> str:
        try:
            return self.fmt % value
        except (TypeError, ValueError):  # a format from an older page that no longer fits
            return f"{value:g}"


class GuessStore:
    def __init__(self, history: HistoryStore):
        self._history = history  # its file has the guesses table (server/state.py)

    def lock(self, learner_id: str, question_key: str, question: str, value: float | None, fmt: str = "%g") -> Guess:
        guess = Guess(question_key, question, None if value is None else float(value), time.time(), fmt)
        with self._history.connect() as db:
            db.execute("INSERT OR REPLACE INTO guesses (learner_id, question_key, question, value, locked_at, fmt) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       (learner_id, question_key, question, guess.value, guess.locked_at, fmt))
        return guess

    def reveal(self, learner_id: str, question_key: str, answer: float, answered_by: str | None = None) -> None:
        """Record the answer a page showed beside a locked guess (the newest, if the measurement changed), and where
        it was measured."""
        with self._history.connect() as db:
            db.execute("UPDATE guesses SET answer = ?, answered_at = ?, answered_by = ? WHERE learner_id = ? AND "
                       "question_key = ?", (float(answer), time.time(), answered_by, learner_id, question_key))

    def get(self, learner_id: str, question_key: str) -> Guess | None:
        with self._history.connect() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM guesses WHERE learner_id = ? AND question_key = ?",
                             (learner_id, question_key)).fetchone()
        return Guess(*row) if row else None

    def of(self, learner_id: str) -> list[Guess]:
        """One learner's locked guesses, oldest first (their lab report)."""
        with self._history.connect() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM guesses WHERE learner_id = ? ORDER BY locked_at",
                              (learner_id,)).fetchall()
        return [Guess(*row) for row in rows]

    def forget(self, learner_id: str, question_key: str) -> None:
        with self._history.connect() as db:
            db.execute("DELETE FROM guesses WHERE learner_id = ? AND question_key = ?", (learner_id, question_key))

    def everyone(self) -> dict[str, list[Guess]]:
        """Every learner's locked guesses, by learner id, oldest first (the instructor's roster)."""
        found: dict[str, list[Guess]] = {}
        with self._history.connect() as db:
            for row in db.execute(f"SELECT learner_id, {_COLUMNS} FROM guesses ORDER BY locked_at"):
                found.setdefault(row["learner_id"], []).append(Guess(*tuple(row)[1:]))
        return found
