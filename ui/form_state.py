"""Values a learner (or a crafted link) can set: a widget's value kept in session state, and presets from the
address bar, each checked against its Choice (server/choices.py) and refused in one line."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from server.choices import Choice, accepts, fallback, refusal

APPLIED_PARAMS_KEY = "amp_lab_applied_query_params"
REFUSED_KEY = "amp_lab_refused_link_values"  # widget key -> (the refusal, the value used instead)


def start_from(choices: Sequence[Choice], values: dict) -> None:
    """Where a fresh session's widgets start (after a reload: the learner's latest settings), for each choice not
    set yet and whose value is still offered; a link's values, applied after, win over these."""
    for choice in choices:
        if choice.key not in st.session_state and choice.param in values and accepts(choice, values[choice.param]):
            st.session_state[choice.key] = values[choice.param]


def checked_state(choice: Choice) -> object:
    """Keep a bad value set through session state away from the widget: say so, and put the default back.

    Call before the widget is drawn; fills in the default when nothing is set yet.
    """
    if choice.key not in st.session_state:
        st.session_state[choice.key] = choice.default
    value = st.session_state[choice.key]
    if not accepts(choice, value):
        st.error(refusal(choice, value, "set in the session state"))
        st.session_state[choice.key] = value = choice.default
    return value


def apply_query_params(choices: Sequence[Choice]) -> None:
    """Preset widgets from the address bar (e.g. ?epochs=3&batch_size=128), refusing values out of range: a refused
    one falls back to the class's preset or the smallest offered value, and its line stays until the learner
    changes that setting.

    A given address is applied once, so later widget changes are not overwritten by the same link.
    """
    given = {c.param: st.query_params.get(name) for c in choices
             for name in (c.param, c.old_param) if name and name in st.query_params}
    refused = st.session_state.setdefault(REFUSED_KEY, {})
    if given and st.session_state.get(APPLIED_PARAMS_KEY) != given:
        st.session_state[APPLIED_PARAMS_KEY] = given
        for choice in (choice for choice in choices if choice.param in given):
            text = given[choice.param]
            try:
                value = choice.parse(text)
            except (TypeError, ValueError):
                value = text
            if accepts(choice, value):
                st.session_state[choice.key] = value
            else:
                instead = fallback(choice)
                refused[choice.key] = (refusal(choice, text, "in the address", instead), instead)
                st.session_state[choice.key] = instead
    for key, (message, instead) in list(refused.items()):
        if st.session_state.get(key) == instead:
            st.error(message)
        else:
            del refused[key]  # the learner chose another value: the line has done its work
