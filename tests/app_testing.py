"""What the AppTest files share: the app with an empty state folder and data root, and small element readers."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[1] / "app.py"


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    """A fresh state folder and an empty data root, so only synthetic data is offered."""
    monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path / "state"))
    # Open mode: these tests queue every kind of job as often as they need; tests of class mode turn it on.
    monkeypatch.setenv("AMP_LAB_CLASS_MODE", "off")
    monkeypatch.setenv("AMP_LAB_DATA_ROOT", str(tmp_path / "data"))
    machine_like_the_references(monkeypatch)
    return tmp_path / "state"


# The machine the committed references were recorded on: a CPU without bf16 instructions (reference/index.json).
REFERENCE_MACHINE = {"device_type": "cpu", "device_name": "AMD EPYC", "cpu_flags": []}


def machine_like_the_references(monkeypatch) -> None:
    """The server's machine as the references' class, whatever CPU runs the tests (CI machines differ: some have
    bf16 units), so that the pages' reference answers are there; tests of another class set their own after."""
    import ui.reference

    monkeypatch.setattr(ui.reference, "this_machine", lambda: dict(REFERENCE_MACHINE))


@pytest.fixture(autouse=True)
def navigation_as_served(monkeypatch):
    """Run app.py's st.navigation on every rerun, as serve.py makes the real server do (Streamlit would otherwise
    treat the pages/ folder as a legacy multipage app and rerun a page file alone). AppTest resets the flag
    before each run, so it is set again right after the pages manager is made."""
    make = PagesManager.__init__

    def make_as_served(self, *args, **kwargs):
        make(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", make_as_served)


def started_app() -> AppTest:
    """The whole app through app.py's navigation, after its first run."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    return at


@pytest.fixture
def app(state_dir):
    """The whole app; the job manager is shut down afterwards."""
    yield started_app()
    st.cache_resource.clear()  # releases the job manager, which cancels anything still running


@pytest.fixture
def app_on_server(state_dir, monkeypatch):
    """The whole app on a server set up by AMP_LAB_* variables: `app_on_server(DEVICE="cpu")`."""

    def start(**settings: str) -> AppTest:
        for name, value in settings.items():
            monkeypatch.setenv(f"AMP_LAB_{name}", value)
        return started_app()

    yield start
    st.cache_resource.clear()


def open_page(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(elements) -> list[str]:
    return [element.value for element in elements]


STEP_PICTURE_TITLE = "One AMP training step"  # ui/learn_charts.amp_step_chart, on every Learn page


def charts(at: AppTest) -> list:
    """The page's charts of data: every Vega-Lite chart but the picture of an AMP step at the top of a Learn page."""
    return [chart for chart in at.get("vega_lite_chart") if STEP_PICTURE_TITLE not in chart.proto.spec]


def step_pictures(at: AppTest) -> list:
    return [chart for chart in at.get("vega_lite_chart") if STEP_PICTURE_TITLE in chart.proto.spec]
