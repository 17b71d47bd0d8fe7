"""AMP Lab: navigation only (and who the learner is and their job, in the sidebar of every page). Every page lives
in pages/."""

import streamlit as st

from ui import identity, sidebar

st.set_page_config(page_title="AMP Lab", page_icon="⚡", layout="wide")
sidebar.learner_panel()  # first, so that sign-in (when configured) comes before any page

pages = {
    # The walkthrough's order: the lab's two scripts, what autocast does to each layer, the formats behind
    # it, fp16's underflow and the scaler that prevents it, where the memory goes (which the lab's second claim
    # needs before it is measured); then run it, read the results, and ask why the speedup is what it is. The
    # Overview names the core path through them (Overview, Adding AMP, Run, Results, When AMP pays off).
    "Learn": [
        st.Page("pages/overview.py", title="Overview", default=True),
        st.Page("pages/fp32_baseline.py", title="The fp32 baseline", url_path="baseline"),
        st.Page("pages/adding_amp.py", title="Adding AMP", url_path="adding-amp"),
        st.Page("pages/autocast_layers.py", title="Autocast layer by layer", url_path="autocast"),
        st.Page("pages/number_formats.py", title="Number formats", url_path="number-formats"),
        st.Page("pages/underflow.py", title="Underflow in fp16", url_path="underflow"),
        st.Page("pages/loss_scaling.py", title="The scaler at work", url_path="loss-scaling"),
        st.Page("pages/memory.py", title="Where the memory goes", url_path="memory"),
    ],
    "Experiment": [
        st.Page("pages/run_experiment.py", title="Run the experiment", url_path="run"),
        st.Page("pages/safeguards.py", title="AMP without its safeguards", url_path="safeguards"),
    ],
    "Results": [
        st.Page("pages/results.py", title="Results", url_path="results"),
        st.Page("pages/when_amp_pays.py", title="When AMP pays off", url_path="when-amp-pays"),
        st.Page("pages/history.py", title="History", url_path="history"),
    ],
    # Last, the walkthrough's end: the patterns real training code needs beyond the lab's three lines.
    "Your own code": [
        st.Page("pages/recipe.py", title="The AMP recipe", url_path="recipe"),
    ],
}
if identity.is_instructor():  # the console is in the navigation only for the instructor
    pages["Instructor"] = [st.Page("pages/instructor.py", title="Instructor console", url_path="instructor")]
navigation = st.navigation(pages)
if st.session_state.pop(sidebar.OPEN_CONSOLE_KEY, False) and "Instructor" in pages:
    st.switch_page(pages["Instructor"][0])  # a sign-in lands on the console
sidebar.your_jobs()  # after st.navigation: its links name pages
navigation.run()
