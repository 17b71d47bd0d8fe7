"""Values from session state or the address bar are checked against their choice and refused in one line; the
learner these pages serve stays the same across reruns and private links (ui/identity)."""

import pytest
from streamlit.testing.v1 import AppTest


def checked_script():
    import streamlit as st

    from server.choices import Choice, parse_int
    from ui import form_state, identity

    epochs = Choice("run_epochs", "Epochs", tuple(range(1, 21)), 5, "epochs", parse_int)
    form_state.apply_query_params([epochs])
    form_state.checked_state(epochs)
    st.select_slider("Epochs", epochs.allowed, key=epochs.key)
    st.write(f"learner {identity.learner_id()}")


def test_a_bad_value_in_session_state_is_refused_with_a_message():
    at = AppTest.from_function(checked_script, default_timeout=60)
    at.session_state["run_epochs"] = 99
    at.run()
    assert not at.exception
    refused = "Epochs 99 set in the session state is not allowed here: choose 1 to 20. Using 5 instead."
    assert at.error[0].value == refused
    assert at.select_slider(key="run_epochs").value == 5


def test_query_params_preset_a_value_once_and_refuse_bad_ones():
    at = AppTest.from_function(checked_script, default_timeout=60)
    at.query_params["epochs"] = "7"
    at.run()
    assert not at.error and at.select_slider(key="run_epochs").value == 7
    at.select_slider(key="run_epochs").set_value(9).run()
    assert at.select_slider(key="run_epochs").value == 9  # the same address does not undo the learner's change

    bad = AppTest.from_function(checked_script, default_timeout=60)
    bad.query_params["epochs"] = "lots"
    bad.run()
    assert not bad.exception
    assert bad.error[0].value.startswith("Epochs 'lots' in the address is not allowed here: choose 1 to 20.")
    assert bad.select_slider(key="run_epochs").value == 1  # issue 33: the smallest offered, without a preset


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_learner_stays_the_same_across_reruns_and_a_new_browser_is_another(state_dir):
    at = AppTest.from_function(checked_script, default_timeout=60).run()
    first = at.markdown[0].value
    assert first == at.run().markdown[0].value
    assert first != AppTest.from_function(checked_script, default_timeout=60).run().markdown[0].value


@pytest.mark.slow
def test_a_private_link_opens_the_same_learner_and_a_forged_one_does_not(state_dir):
    at = AppTest.from_function(checked_script, default_timeout=60).run()
    me, token = at.session_state["amp_lab_learner"], at.session_state["amp_lab_learner_token"]
    linked = AppTest.from_function(checked_script, default_timeout=60)
    linked.query_params["learner"] = token
    assert linked.run().markdown[0].value == f"learner {me.id}"
    forged = AppTest.from_function(checked_script, default_timeout=60)
    forged.query_params["learner"] = token[:-2] + "xx"
    assert forged.run().markdown[0].value != f"learner {me.id}"


def test_a_refused_link_value_falls_back_to_the_cheapest_or_the_preset_and_its_line_stays_until_changed():
    """Issue 33: a mistyped ?subset= started all 50,000 images and its warning went at the next click."""
    from server.choices import Choice, fallback, parse_optional_int, preset

    subset = Choice("run_subset", "Training images", (256, 1024, 5000, None), None, "subset", parse_optional_int)
    assert fallback(subset) == 256  # the smallest offered, not the default's whole split
    assert fallback(preset(subset, "1024")[0]) == 1024  # the class's preset where there is one

    def page():
        import streamlit as st

        from server.choices import Choice, parse_optional_int
        from ui import form_state

        choice = Choice("run_subset", "Training images", (256, 1024, 5000, None), None, "subset", parse_optional_int)
        form_state.apply_query_params([choice])
        st.selectbox("Training images", choice.allowed, key=choice.key)

    at = AppTest.from_function(page)
    at.query_params["subset"] = "4096"
    at.run()
    assert at.session_state["run_subset"] == 256
    line = "Training images '4096' in the address is not allowed here: choose 256, 1024, 5000, None. Using 256 instead."
    assert [e.value for e in at.error] == [line]
    at.run()  # another click: the line stays while the fallback does
    assert [e.value for e in at.error] == [line]
    at.selectbox(key="run_subset").set_value(1024).run()
    assert len(at.error) == 0  # changed by the learner: the line has done its work
