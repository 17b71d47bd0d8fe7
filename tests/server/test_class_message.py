"""The instructor's message to the class: set, kept across a restart, cleared; one line, refused when empty or long."""

import pytest

from server.class_message import MAX_MESSAGE_CHARS, ClassMessageStore
from server.history import HistoryStore
from trainer.errors import ConfigError


def test_a_message_is_kept_until_it_is_cleared(tmp_path):
    history = HistoryStore(tmp_path / "history.sqlite3")
    ClassMessageStore(history).set("  The queue is paused\nfor 5 minutes ")
    again = ClassMessageStore(HistoryStore(tmp_path / "history.sqlite3")).get()  # a restarted server
    assert again.text == "The queue is paused for 5 minutes" and again.set_at > 0
    ClassMessageStore(history).clear()
    assert ClassMessageStore(history).get() is None


@pytest.mark.parametrize("text", ["", "   ", None, "x" * (MAX_MESSAGE_CHARS + 1)])
def test_an_empty_or_long_message_is_refused(tmp_path, text):
    with pytest.raises(ConfigError):
        ClassMessageStore(HistoryStore(tmp_path / "history.sqlite3")).set(text)
