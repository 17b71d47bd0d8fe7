"""Checking a learner's values: allowed sets, messages, and parsing address-bar text."""

import pytest

from server.choices import Choice, accepts, describe_allowed, parse_bool, parse_optional_int, refusal, shown

EPOCHS = Choice("run_epochs", "Epochs", tuple(range(1, 21)), 5, "epochs", int)


def test_accepts_only_allowed_values_of_the_same_type():
    assert accepts(EPOCHS, 20)
    assert not accepts(EPOCHS, 21)
    assert not accepts(EPOCHS, 5.0)
    assert not accepts(EPOCHS, "5")
    assert not accepts(Choice("x", "X", (0, 1), 0), True)
    assert accepts(Choice("s", "Subset", (256, None), None), None)


def test_a_refusal_names_the_value_the_allowed_range_and_the_default():
    message = refusal(EPOCHS, 999, "in the address")
    assert message == "Epochs 999 in the address is not allowed here: choose 1 to 20. Using 5 instead."
    listed = Choice("run_amp", "AMP mode", ("amp-fp16", "amp-bf16"), "amp-bf16")
    assert describe_allowed(listed) == "amp-fp16, amp-bf16"


def test_values_from_outside_cannot_inject_markdown():
    assert shown("[click](http://x)") == "'\\[click\\]\\(http\\://x\\)'"
    assert len(shown("a" * 500)) < 60


@pytest.mark.parametrize("text, value", [("all", None), ("None", None), ("256", 256)])
def test_parse_optional_int(text, value):
    assert parse_optional_int(text) == value


def test_parse_bool_refuses_anything_but_clear_words():
    assert parse_bool("true") is True and parse_bool("0") is False
    with pytest.raises(ValueError):
        parse_bool("maybe")
