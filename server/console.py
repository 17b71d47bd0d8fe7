"""What the instructor sets in the console for the whole class, kept in the server's history file so that a restart
keeps it: the message above every page, the presets every Run page starts from, the kinds of job learners may
queue, and when the class began (the kinds' per-learner caps count from then, whatever the console saves, until
it starts a new class). One row per setting, its value as JSON; None where the console has set none (the settings
file's apply)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from server.history import HistoryStore
from server.kinds import OPEN_MODE, KindPolicy, KindRule, parse_rules
from server.presets import parse_presets, presets_text
from trainer.errors import ConfigError

MAX_MESSAGE_CHARS = 300
MESSAGE, PRESETS, KINDS, CLASS_START = "message", "presets", "kinds", "class_start"

@dataclass(frozen=True)
class ClassMessage:
    text: str
    set_at: float  # epoch seconds


class ConsoleStore:
    """The console's settings for the class; each method opens its own connection, as the history's do."""

    def __init__(self, history: HistoryStore, started_at: float | None = None):
        """`started_at`: when this server started (default now), the class's start until the console saves one."""
        self._history = history
        self._started_at = time.time() if started_at is None else started_at

    def message(self) -> ClassMessage | None:
        """The instructor's message to the class, shown above every page while it is set."""
        (value,) = self._read(MESSAGE)
        return None if value is None else ClassMessage(value["text"], value["set_at"])

    def set_message(self, text: object) -> ClassMessage:
        """Show `text` to every learner (one line, at most MAX_MESSAGE_CHARS); ConfigError for an empty or long one."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("a message for the class needs some text; clear it to show none")
        text = " ".join(text.split())
        if len(text) > MAX_MESSAGE_CHARS:
            raise ConfigError(f"a message for the class has at most {MAX_MESSAGE_CHARS} characters, got {len(text)}")
        message = ClassMessage(text, time.time())
        self._set({MESSAGE: {"text": message.text, "set_at": message.set_at}})
        return message

    def presets(self) -> dict[str, str] | None:
        """The console's presets, which win over the settings file's; None when the console never set any."""
        (value,) = self._read(PRESETS)
        return None if value is None else parse_presets(value)

    def set_presets(self, text: str) -> dict[str, str]:
        presets = parse_presets(text)
        self._set({PRESETS: presets_text(presets)})
        return presets

    def kinds(self) -> KindPolicy | None:
        """The console's policy of which kinds of job learners may queue (it wins over the settings' mode); None
        until the instructor sets one."""
        rules, since = self._read(KINDS, CLASS_START)
        return None if rules is None else KindPolicy(parse_rules(rules), since, "set in the console")

    def class_start(self) -> float:
        """When the per-learner caps begin counting: the class's start as the console saved it, else this server's
        start."""
        (saved,) = self._read(CLASS_START)
        return self._started_at if saved is None else saved

    def set_kinds(self, rules: Mapping[str, KindRule], restart_counts: bool = False) -> KindPolicy:
        """Save the rules for every learner. Their caps go on counting from the class's start, which saving rules
        never moves (so a lowered cap restores no allowance); with `restart_counts`, from now on (a new class)."""
        since = time.time() if restart_counts else self.class_start()
        policy = KindPolicy({**OPEN_MODE, **rules}, since, "set in the console")
        self._set({KINDS: policy.to_dict(), CLASS_START: since})
        return policy

    def clear(self, name: str) -> None:
        """Back to none of `name` (MESSAGE, PRESETS or KINDS): the settings file's apply."""
        with self._history.connect() as db:
            db.execute("DELETE FROM console WHERE name = ?", (name,))

    def _read(self, *names: str) -> list:
        """Each setting's value, None where it has none; in one read."""
        with self._history.connect() as db:
            rows = db.execute(f"SELECT name, value FROM console WHERE name IN ({', '.join('?' * len(names))})", names)
            found = {row["name"]: json.loads(row["value"]) for row in rows}
        return [found.get(name) for name in names]

    def _set(self, values: dict) -> None:
        with self._history.connect() as db:
            db.executemany("INSERT OR REPLACE INTO console (name, value) VALUES (?, ?)",
                           [(name, json.dumps(value)) for name, value in values.items()])
