"""The Learn pages read in a few minutes each: the prose they show outside expanders, counted through AppTest on a
CPU server, stays within a budget (issue 25: about 3,950 words before, at most 2,500 after)."""

import re

import pytest

from tests.app_testing import app, navigation_as_served, open_page, state_dir  # noqa: F401 (fixtures)
from tests.pages.test_app import LEARN_PAGES

WORD_BUDGET = 2_500
PROSE = {"title", "header", "subheader", "markdown", "caption", "latex", "info", "success", "warning", "error"}
HIDDEN = {"expander", "popover"}  # read only when the learner opens them
WORD = re.compile(r"[A-Za-z0-9][\w'.,%×-]*")


@pytest.fixture(autouse=True)
def cpu_server(monkeypatch):
    """Pinned, so that the budget holds for what a CPU server shows (a GPU server adds its own lines)."""
    monkeypatch.setenv("AMP_LAB_DEVICE", "cpu")


def prose(node) -> list[str]:
    """The text of every prose element under `node` that is not inside an expander or a popover; code blocks,
    tables, charts, widget labels and links are not prose."""
    if getattr(node, "type", None) in HIDDEN:
        return []
    children = getattr(node, "children", None)
    if children:
        return [text for child in children.values() for text in prose(child)]
    return [node.value] if getattr(node, "type", None) in PROSE else []


def words(text: str) -> int:
    return len(WORD.findall(re.sub(r"<[^>]+>", " ", text)))  # an HTML tag (the coloured bits) is not a word


def test_words_counts_words_not_markup():
    assert words("Loss scaling **multiplies** the loss by `S`.") == 7
    assert words('<span style="color:#d62728">■ sign</span>') == 1


@pytest.mark.slow
def test_prose_is_what_a_page_shows_outside_its_expanders(app):
    open_page(app, "adding_amp")
    shown = " ".join(prose(app.main))
    (deeper,) = [e for e in app.expander if e.label.startswith("Deeper: the three lists")]
    hidden = " ".join(m.value for m in deeper.markdown)
    assert "Inside `with torch.autocast" in shown and "accumulator" in hidden and "accumulator" not in shown
    open_page(app, "overview")
    assert any(text.startswith("**What to expect here:**") for text in prose(app.main))  # an st.info is prose


@pytest.mark.slow
def test_the_learn_pages_show_at_most_the_budget_of_prose_outside_expanders(app):
    counts = {}
    for page in LEARN_PAGES:  # the page itself: its sidebar (the learner's name, their job) is no part of the lesson
        open_page(app, page)
        counts[page] = sum(words(text) for text in prose(app.main))
    total = sum(counts.values())
    assert total <= WORD_BUDGET, f"{total} words of prose outside expanders (budget {WORD_BUDGET}): {counts}"
