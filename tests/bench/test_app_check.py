"""Step 5's check on its own: the page's part is reported apart from the job, whatever Streamlit does."""

import sys
import types

import pytest

from bench.app_check import load_app_test, page_report

DONE_JOB = {"job_id": "abc123", "status": "done"}


def fake_testing_module(monkeypatch, app_test) -> None:
    """`streamlit.testing.v1` as this test gives it (AppTest=None: a module without AppTest, which fails the
    import as a broken Streamlit would)."""
    module = types.ModuleType("streamlit.testing.v1")
    if app_test is not None:
        module.AppTest = app_test
    monkeypatch.setitem(sys.modules, "streamlit.testing.v1", module)


class RaisingAppTest:
    @classmethod
    def from_file(cls, *args, **kwargs):
        raise RuntimeError("the page's script raised\nwith a second line")


def test_a_page_that_raises_is_reported_as_not_rendered_in_one_line(monkeypatch):
    fake_testing_module(monkeypatch, RaisingAppTest)
    app_test, error = load_app_test()
    assert (app_test, error) == (RaisingAppTest, None)
    assert page_report(app_test, error, DONE_JOB) == {
        "rendered": False, "error": "the page failed: RuntimeError: the page's script raised with a second line"}


def test_a_streamlit_that_cannot_be_imported_is_said_once_and_the_page_not_tried(monkeypatch):
    fake_testing_module(monkeypatch, None)
    app_test, error = load_app_test()
    assert app_test is None and error.startswith("Streamlit cannot be imported: ImportError: cannot import name")
    assert page_report(app_test, error, DONE_JOB) == {"rendered": False, "error": error}


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_the_page_is_not_rendered_for_a_job_that_did_not_finish(status):
    report = page_report(RaisingAppTest, None, {"job_id": "abc123", "status": status})
    assert report == {"rendered": False, "error": f"not rendered: the job {status}"}
