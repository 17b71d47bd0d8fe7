"""How close a guess was, in words."""

from ui.predict import closeness


def test_closeness_in_words():
    assert closeness(40, 42, 80) == "spot on"
    assert closeness(40, 50, 80) == "close: the measured value is higher than your guess"
    assert closeness(40, 5, 80) == "off: the measured value is lower than your guess"
    assert closeness(3, 3, 0) == "spot on"


def test_a_ratio_or_share_is_scored_on_a_log_scale():
    from ui.predict import closeness

    assert closeness(1.0, 1.05, span=4, log=True) == "spot on"
    assert closeness(0.5, 0.6, span=4, log=True) == closeness(1.0, 1.2, span=4, log=True)  # the same factor
    assert closeness(1.0, 1.2, span=4, log=True) == "close: the measured value is 1.2 times higher"
    assert closeness(1.0, 0.1, span=4, log=True) == "off: the measured value is 10.0 times lower"
    # On the slider's linear range a 0.5x guess for a 0.1x answer reads "close"; it is five times off. A zero falls
    # back to the linear range.
    assert closeness(0.5, 0.1, span=4).startswith("close")
    assert closeness(0.5, 0.1, span=4, log=True) == "off: the measured value is 5.0 times lower"
    assert closeness(0.0, 0.1, span=4, log=True) == closeness(0.0, 0.1, span=4)
