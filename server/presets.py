"""The lab's presets: the settings every learner's Run page starts from, written as a link's query string
(`epochs=1&batch_size=128&subset=2048`), set in the instructor's settings or from the console."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from server.history import HistoryStore
from trainer.errors import ConfigError

# The Run page's settings a preset may fix (the same names a link's ?epochs=... uses).
PRESET_PARAMS = ("epochs", "batch_size", "subset", "data", "loader", "precision", "width", "channels_last")
RENAMED_PARAMS = {"amp": "precision"}  # an earlier version's name -> today's; still read
MAX_PRESET_CHARS = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS presets (
    id INTEGER PRIMARY KEY CHECK (id = 1),  -- one row: the console's presets, which win over the settings file
    query TEXT NOT NULL
);
"""


def parse_presets(text: object) -> dict[str, str]:
    """`epochs=1&batch_size=128` -> {"epochs": "1", "batch_size": "128"}; ConfigError (one line) for anything else.

    Values are checked against the Run page's choices where they are used, as a link's would be.
    """
    if text is None:
        return {}
    if not isinstance(text, str) or len(text) > MAX_PRESET_CHARS:
        raise ConfigError(f"presets must be text like epochs=1&batch_size=128, at most {MAX_PRESET_CHARS} characters")
    try:
        pairs = parse_qsl(text.strip().lstrip("?"), strict_parsing=bool(text.strip()))
    except ValueError:
        raise ConfigError(f"presets {text!r} are not name=value pairs joined by '&' (e.g. epochs=1&batch_size=128)")
    presets: dict[str, str] = {}
    for name, value in pairs:
        name = RENAMED_PARAMS.get(name, name)
        if name not in PRESET_PARAMS:
            raise ConfigError(f"unknown preset {name!r}: choose from {', '.join(PRESET_PARAMS)}")
        if name in presets:
            raise ConfigError(f"the preset {name!r} is given twice")
        presets[name] = value
    return presets


def presets_text(presets: dict[str, str]) -> str:
    return urlencode(presets)


class PresetStore:
    """The console's presets, kept in the server's history file so that they survive restarts."""

    def __init__(self, history: HistoryStore):
        self._history = history
        with history.connect() as db:
            db.executescript(_SCHEMA)

    def get(self) -> dict[str, str] | None:
        """The console's presets, or None when the console never set any (the settings file's apply)."""
        with self._history.connect() as db:
            row = db.execute("SELECT query FROM presets WHERE id = 1").fetchone()
        return None if row is None else parse_presets(row["query"])

    def set(self, text: str) -> dict[str, str]:
        presets = parse_presets(text)
        with self._history.connect() as db:
            db.execute("INSERT INTO presets (id, query) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET query = "
                       "excluded.query", (presets_text(presets),))
        return presets

    def clear(self) -> None:
        with self._history.connect() as db:
            db.execute("DELETE FROM presets")
