"""Predict, then check: the learner commits a guess before a measured answer is shown, then sees how close it was."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from ui import server_bundle
from ui.identity import learner_id

SKIPPED = "skipped"


# On a log scale (ratios, shares): within 10% of the answer is spot on, within a factor of 1.5 close.
SPOT_ON_FACTOR, CLOSE_FACTOR = 1.1, 1.5


def closeness(guess: float, answer: float, span: float, log: bool = False) -> str:
    """How far a guess was from the measured answer, in words: on a log scale for a ratio or a share (`log`: 1.2x
    against 1.0x is as far as 0.6x against 0.5x), else as a share of `span`, the slider's range."""
    if log and guess > 0 and answer > 0:
        factor = max(answer / guess, guess / answer)
        if factor <= SPOT_ON_FACTOR:
            return "spot on"
        side = "higher" if answer > guess else "lower"
        return f"{'close' if factor <= CLOSE_FACTOR else 'off'}: the measured value is {factor:.1f} times {side}"
    off = abs(guess - answer) / span if span else 0.0
    if off <= 0.05:
        return "spot on"
    side = "higher" if answer > guess else "lower"
    return f"{'close' if off <= 0.2 else 'off'}: the measured value is {side} than your guess"


def predict_then_check(key: str, question: str, *, low: float, high: float, default: float, step: float,
                       fmt: str, answer: float | None, pending: str = "", log: bool = False,
                       options: Sequence[float] | None = None, why: str | None = None,
                       answered_by: str | None = None) -> bool:
    """A guess slider and a lock button; once locked, the guess beside the measured `answer` (printf `fmt`).
    Returns True once the learner has locked a guess (or asked to skip it), so a page can hold its answer back
    until then."""
    state = f"predict-{key}"
    with st.container(border=True):
        st.markdown(f"**Predict, then check.** {question}")
        guess = locked(key)
        if guess is None:
            if options:  # a log-spaced choice (a ratio or share that spans decades)
                chosen = st.select_slider("Your guess", options=list(options), value=default,
                                          format_func=lambda value: fmt % value, key=f"{state}-slider")
            else:
                chosen = st.slider("Your guess", min_value=low, max_value=high, value=default, step=step, format=fmt,
                                   key=f"{state}-slider")
            lock, skip = st.columns([1, 3])
            if lock.button("Lock in my guess", key=f"{state}-lock"):
                _lock(key, question, chosen, fmt)
                st.rerun()
            if skip.button("Just show me", key=f"{state}-skip", type="tertiary"):
                _lock(key, question, None, fmt)
                st.rerun()
            return False
        if answer is not None:
            _record_answer(key, answer, answered_by)
        if guess == SKIPPED:
            st.markdown("No guess this time." + ("" if answer is None else f" Measured: **{fmt % answer}**."))
        elif answer is None:
            st.markdown(f"Your guess: **{fmt % guess}**. {pending or 'The answer appears once it is measured.'}")
        else:
            st.markdown(f"Your guess: **{fmt % guess}** · measured: **{fmt % answer}** "
                        f"({closeness(guess, answer, high - low, log)}).")
        if answer is not None and why:
            st.markdown(f"**Why:** {why}")
        if st.button("Guess again", key=f"{state}-again"):
            server_bundle.guesses().forget(learner_id(), key)
            st.session_state.pop(state, None)
            st.session_state.pop(f"{state}-answer", None)
            st.rerun()
        return True


def locked(key: str) -> float | str | None:
    """This learner's locked guess for question `key` (SKIPPED if they asked to see the answer), None before one:
    from the server, so a reload, a second tab or the next day shows it too."""
    state = f"predict-{key}"
    if state not in st.session_state:
        guess = server_bundle.guesses().get(learner_id(), key)
        st.session_state[state] = None if guess is None else SKIPPED if guess.value is None else guess.value
    return st.session_state[state]


def locked_at(key: str) -> float | None:
    """When this learner locked their guess for question `key` (epoch seconds); None without one."""
    guess = server_bundle.guesses().get(learner_id(), key)
    return None if guess is None else guess.locked_at


def _lock(key: str, question: str, value: float | None, fmt: str) -> None:
    server_bundle.guesses().lock(learner_id(), key, question, value, fmt)
    st.session_state[f"predict-{key}"] = SKIPPED if value is None else value
    st.session_state.pop(f"predict-{key}-answer", None)


def _record_answer(key: str, answer: float, answered_by: str | None) -> None:
    """Keep the answer shown beside the guess on the server, with where it was measured (the lab report and the
    console read it there); written once per answer, not on every rerun."""
    remembered = f"predict-{key}-answer"
    if st.session_state.get(remembered) != (answer, answered_by):
        server_bundle.guesses().reveal(learner_id(), key, answer, answered_by)
        st.session_state[remembered] = (answer, answered_by)
