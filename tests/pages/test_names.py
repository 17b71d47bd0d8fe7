"""When the instructor asks for names (ask_names), a new learner gives theirs before the roster lists them."""

from tests.app_testing import app_on_server, navigation_as_served, state_dir, texts  # noqa: F401 (fixtures)

LABEL = "Your instructor asks for your name (shown to the class beside your results)"


def test_a_new_learner_is_asked_for_a_name_once_when_the_instructor_wants_names(app_on_server):
    at = app_on_server(ASK_NAMES="on", DEVICE="cpu")
    generated = at.session_state["amp_lab_learner"].display_name
    box = next(t for t in at.text_input if t.label == LABEL)
    box.input("Grace Hopper")
    next(b for b in at.button if b.label == "Save my name").click().run()
    assert not at.exception
    assert "You are **Grace Hopper**" in texts(at.sidebar.caption) and generated != "Grace Hopper"
    assert not [t for t in at.text_input if t.label == LABEL]  # asked once


def test_without_ask_names_the_generated_name_stands(app_on_server):
    at = app_on_server(DEVICE="cpu")
    assert not [t for t in at.text_input if t.label == LABEL]
