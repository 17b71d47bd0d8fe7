"""How close a guess was, in words."""

from ui.predict import closeness


def test_closeness_in_words():
    assert closeness(40, 42, 80) == "spot on"
    assert closeness(40, 50, 80) == "close: the measured value is higher than your guess"
    assert closeness(40, 5, 80) == "off: the measured value is lower than your guess"
    assert closeness(3, 3, 0) == "spot on"
