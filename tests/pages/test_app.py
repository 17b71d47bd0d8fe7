"""app.py's navigation as the walkthrough (each learn page's Next link goes to the page after it), and the text
learners read kept free of the claims issue 13 corrected. Read from the sources: no page runs here."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The order app.py gives the pages (README, Layout, says why History comes before the recipe).
WALKTHROUGH = [
    "overview", "fp32_baseline", "adding_amp", "autocast_layers", "number_formats", "underflow", "loss_scaling",
    "memory", "run_experiment", "safeguards", "results", "when_amp_pays", "history", "recipe",
]
LEARN_PAGES = WALKTHROUGH[: WALKTHROUGH.index("run_experiment")]


def navigation() -> list[str]:
    """The page files of app.py's st.Page calls, in their order (without pages/ and .py)."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    return [Path(node.args[0].value).stem for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Page"
            and node.args and isinstance(node.args[0], ast.Constant)]


def last_next_link(page: str) -> str | None:
    """The page a page file's last statement links to with next_link, or None when it does not end with one."""
    last = ast.parse((ROOT / "pages" / f"{page}.py").read_text(encoding="utf-8")).body[-1]
    call = last.value if isinstance(last, ast.Expr) else None
    if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "next_link":
        return Path(call.args[0].value).stem
    return None


def test_the_navigation_is_the_walkthroughs_order():
    assert [page for page in navigation() if page != "instructor"] == WALKTHROUGH


@pytest.mark.parametrize("page", LEARN_PAGES)
def test_each_learn_page_ends_with_a_next_link_to_the_page_after_it(page):
    assert last_next_link(page) == WALKTHROUGH[WALKTHROUGH.index(page) + 1]


def test_the_walkthroughs_end_links_on_to_the_recipe_and_back_to_run():
    assert last_next_link("when_amp_pays") == "recipe" and last_next_link("recipe") == "run_experiment"


# What a learner reads: the pages, the lessons, the lab scripts, and the modules whose sentences the pages show.
READ_BY_LEARNERS = [*sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "lessons").glob("*.py")),
                    *sorted((ROOT / "lab").glob("*.py")), ROOT / "ui" / "experiment.py", ROOT / "server" / "offer.py",
                    ROOT / "trainer" / "environment.py", ROOT / "trainer" / "capabilities.py"]
CORRECTED = {
    "36% faster": r"36% faster",  # 75 s -> 48 s is 1.56x as fast, 36% less time
    "overflow above 65504": r"(above|larger than) 65504",  # 65504 < x < 65520 still rounds to 65504
    "underflow below half": r"(?<!at or )below half (of )?(the|fp16's) smallest",  # a tie at half rounds to 0
    "many gradients underflow": r"many gradients underflow",  # 0.13% vanish in the lab model; many lose bits
    "halving the arithmetic": r"halv(ing|es) the arithmetic",  # AMP moves products to Tensor Cores and halves bytes
    "matmuls sum in 16 bits": r"each output sums many products",  # 16-bit inputs, fp32 accumulation
    "no CPU has fast fp16": r"CPUs have no fast fp16|on a CPU is tens of times slower",  # AMX-FP16 CPUs do
}


def readable(path: Path) -> str:
    """The file's text with Python's string joins across lines undone and whitespace collapsed."""
    text = re.sub(r"\"\s*\n\s*f?\"", "", path.read_text(encoding="utf-8"))
    return " ".join(text.split())


@pytest.mark.parametrize("claim", list(CORRECTED))
def test_no_page_repeats_a_claim_issue_13_corrected(claim):
    found = [path.relative_to(ROOT).as_posix() for path in READ_BY_LEARNERS
             if re.search(CORRECTED[claim], readable(path), re.IGNORECASE)]
    assert found == []
