"""The instructor's message to the whole class ("the queue is paused for 5 minutes"), shown above every page until
it is cleared; kept in the server's history file so that a restart keeps it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from server.history import HistoryStore
from trainer.errors import ConfigError

MAX_MESSAGE_CHARS = 300

_SCHEMA = """
CREATE TABLE IF NOT EXISTS class_message (
    id INTEGER PRIMARY KEY CHECK (id = 1),  -- one message at a time
    text TEXT NOT NULL,
    set_at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class ClassMessage:
    text: str
    set_at: float  # epoch seconds


class ClassMessageStore:
    def __init__(self, history: HistoryStore):
        self._history = history
        with history.connect() as db:
            db.executescript(_SCHEMA)

    def get(self) -> ClassMessage | None:
        with self._history.connect() as db:
            row = db.execute("SELECT text, set_at FROM class_message WHERE id = 1").fetchone()
        return ClassMessage(row["text"], row["set_at"]) if row else None

    def set(self, text: object) -> ClassMessage:
        """Show `text` to every learner (one line, at most MAX_MESSAGE_CHARS); ConfigError for an empty or long one."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("a message for the class needs some text; clear it to show none")
        text = " ".join(text.split())
        if len(text) > MAX_MESSAGE_CHARS:
            raise ConfigError(f"a message for the class has at most {MAX_MESSAGE_CHARS} characters, got {len(text)}")
        message = ClassMessage(text, time.time())
        with self._history.connect() as db:
            db.execute("INSERT INTO class_message (id, text, set_at) VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                       "text = excluded.text, set_at = excluded.set_at", (message.text, message.set_at))
        return message

    def clear(self) -> None:
        with self._history.connect() as db:
            db.execute("DELETE FROM class_message")
