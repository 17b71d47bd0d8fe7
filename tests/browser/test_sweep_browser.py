"""When AMP pays off and Results as a learner sees them, on one server of this module's own: a running sweep that
follows itself to its verdict with no reload or click (issue 14), and the comparison charts' names and legends at 800 px
(issue 13), drawn from comparisons recorded with the project's command line."""

import dataclasses
import json
import re
import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from lessons.step_budget import PUBLISHED_PEAKS, shape_flops
from server.history import HistoryStore
from server.records import JobSpec, JobView
from trainer.environment import hardware_report
from trainer.isolated import RunOutcome
from trainer.peaks import DevicePeaks
from trainer.profile import CATEGORIES as PROFILE_CATEGORIES
from trainer.results import RunResult
from ui.reference import machine_of, newest_ladders

from .conftest import REPO_ROOT, serve
from .test_app_browser import assert_no_exception, heading, wait_until_idle

SWEEP_TIMEOUT_S = 300  # four short runs in fresh processes on 2 cores; amp-bf16 is emulated (slow) on this CPU
SAMPLE_EVERY_MS = 500  # a running job's fragments redraw every second (ui/jobs.RUNNING_REFRESH_S)
PARTIAL = re.compile(r"^Verdict: No verdict: only (\d) of 4 runs are in")
NOT_YET = "No run of this sweep has finished yet."

QUICK_DEMO = REPO_ROOT / "reference" / "cpu-2026-11-30-quick-demo.json"
# The four figures a CUDA run records (trainer.comparison_table.MEMORY_SHORT_NAMES), in bytes: the longest names on an axis.
GPU_FIGURES = {"torch_max_allocated": 4e8, "torch_max_reserved": 5e8, "nvml_process_used": 7e8,
               "nvml_device_used": 9e8}
# Finished comparisons on the module's server: (pairs of runs, with a GPU's memory figures).
RECORDED = {"one-pair-cpu": (1, False), "three-pairs": (3, False), "gpu-memory-figures": (1, True)}


def open_settled(page, address: str, words: str) -> None:
    """Open `address`, wait for the page's heading and for its script run to end, and check it raised nothing."""
    page.goto(address)
    heading(page, words).wait_for()
    wait_until_idle(page)
    assert_no_exception(page)


def recorded_comparison(pairs: int, gpu_figures: bool) -> list[RunResult]:
    """The project's recorded CPU quick demo (fp32, amp-bf16) as `pairs` pairs; with the figures a GPU records."""
    recorded = json.loads(QUICK_DEMO.read_text(encoding="utf-8"))
    pair = [RunResult.from_dict(recorded["baseline"]), RunResult.from_dict(recorded["candidate"])]
    if gpu_figures:
        pair = [dataclasses.replace(r, peak_memory={k: int(v * (2 - i)) for k, v in GPU_FIGURES.items()})
                for i, r in enumerate(pair)]
    return pair * pairs


# A comparison profiled after its training (trainer/profile.py) and set against measured peaks (trainer/peaks.py), as
# a run with --profile-steps and --measure-peaks records it: the quick demo's pair with those two added. The profile's
# categories are chosen here, so the test knows the changes the page must name.
PROFILED_MS = ({"matrix products": 60.0, "pooling": 40.0, "optimizer": 2.0},
               {"matrix products": 30.0, "pooling": 20.0, "optimizer": 2.0})
MEASURED_PEAKS = DevicePeaks("CPU: recorded", "2.14.1", matmul_tflops={"fp32": 0.2, "bf16": 0.4, "fp16": 0.01},
                             copy_gb_per_s=20.0, launch_us=3.0)


def profiled_comparison() -> list[RunResult]:
    profiled = []
    for result, shares in zip(recorded_comparison(1, False), PROFILED_MS):
        categories = {name: shares.get(name, 1.0) / 1e3 for name in PROFILE_CATEGORIES}
        profiled.append(dataclasses.replace(
            result, device_peaks=MEASURED_PEAKS.to_dict(),
            profile={"steps": 20, "step_s": sum(categories.values()), "categories": categories, "top_ops": [],
                     "kernels": []}))
    return profiled


def finished_comparison(job_id: str, results: list[RunResult]) -> JobView:
    now = time.time()
    outcomes = [RunOutcome(result.config, "ok", result) for result in results]
    label = f"recorded quick demo, {len(results) // 2} pair(s)"
    return JobView(
        id=job_id, learner_id="a-recorded-learner", kind="compare", label=label, status="done",
        queue_position=None, estimated_wait_s=None, current_run=len(outcomes) - 1, progress=None, live_losses=[],
        outcomes=outcomes, error=None, spec=JobSpec("compare", [o.config for o in outcomes], label),
        created_at=now, started_at=now, finished_at=now, extras={},
    )


@pytest.fixture(scope="module")
def lab(browser, tmp_path_factory):
    """One server for the module (its first page view costs ~20 s on 2 cores): batch sizes up to 64, so the sweep's
    smallest two are all it offers, and the RECORDED comparisons already in its history. Yields (url, store)."""
    folder = tmp_path_factory.mktemp("sweep-lab")
    store = HistoryStore(folder / "state" / "history.sqlite3")
    for name, (pairs, gpu_figures) in RECORDED.items():
        store.save_job(finished_comparison(f"recorded-{name}", recorded_comparison(pairs, gpu_figures)))
    store.save_job(finished_comparison("recorded-profiled", profiled_comparison()))
    with serve(folder, env_extra={"AMP_LAB_MAX_BATCH_SIZE": "64"}) as url:
        yield url, store


# One page-side reading of what the learner sees: the progress bars and their captions, the sweep's verdict lines,
# its table (not the reference sweep's, inside an expander).
SNAPSHOT_JS = """(notYet) => {
  const main = document.querySelector('[data-testid="stMain"]');
  const outside = (el) => el.closest('[data-testid="stExpander"]') === null;
  const texts = (sel) => [...main.querySelectorAll(sel)].filter(outside).map((el) => el.innerText.trim());
  return {
    progress: texts('[data-testid="stProgress"]'),
    verdicts: texts('[data-testid="stMarkdown"] p').filter((t) => t.startsWith('Verdict:')),
    notYet: texts('[data-testid="stAlert"]').some((t) => t.includes(notYet)),
    tables: [...main.querySelectorAll('[data-testid="stDataFrame"]')].filter(outside).map((el) => el.textContent),
  };
}"""


def sweep_columns(page):
    """The sweep's two columns of settings (the breakdown above them has a "Steps per run" of its own)."""
    columns = page.locator('[data-testid="stColumn"]')
    return (columns.filter(has=page.get_by_text("Batch sizes", exact=True)),
            columns.filter(has=page.get_by_text("Model widths", exact=True)))


def add_option(page, combobox, option: str) -> None:
    """Open a multiselect and pick `option`. If the list does not stay open for the click (a rerun that draws the
    widget anew closes it: the learner's cookie once did that on a first page view), open it again (a few times at
    most)."""
    for _ in range(4):
        wait_until_idle(page)
        combobox.click()
        try:
            page.get_by_role("option", name=option, exact=True).click(timeout=5_000)
            break
        except PlaywrightTimeoutError:
            page.keyboard.press("Escape")
    page.keyboard.press("Escape")
    wait_until_idle(page)


def set_up_tiny_sweep(page) -> None:
    """Batch 32 and 64 (the two smallest, and all the server's limit of 64 leaves), 10 steps per run, the resident
    loader."""
    page.get_by_role("button", name="Queue the sweep").wait_for()  # the page is drawn down to the sweep's button
    left, right = sweep_columns(page)
    add_option(page, left.get_by_role("combobox", name="Batch sizes"), "32")
    expect(left.get_by_role("group", name="Selected values")).to_have_text(re.compile(r"^(6432|3264)$"))
    # The choice starts a rerun; until it ends the old and the new slider can both be on the page (seen once on a
    # busy machine: "resolved to 2 elements").
    wait_until_idle(page)
    thumb = right.locator('[data-testid="stSlider"] input[type="range"]')
    thumb.focus()
    thumb.press("Home")
    wait_until_idle(page)
    expect(right.locator('[data-testid="stSliderThumbValue"]')).to_have_text("10")
    expect(page.get_by_role("combobox", name="Loader")).to_have_value("resident")
    expect(page.get_by_text(re.compile(r"^4 runs on synthetic data"))).to_be_visible()


def test_a_running_sweep_shows_progress_then_its_verdict_without_a_reload_or_click(page, lab):
    url, store = lab
    open_settled(page, f"{url}/when-amp-pays", "AMP pays off")
    set_up_tiny_sweep(page)
    amp_mode = page.get_by_role("combobox", name="AMP mode").input_value()

    page.get_by_role("button", name="Queue the sweep").click()
    deadline = time.monotonic() + 60
    while not store.list_jobs(kind="sweep"):
        assert time.monotonic() < deadline, "the sweep was not queued"
        time.sleep(0.5)
    (job,) = store.list_jobs(kind="sweep")
    assert [(c.precision, c.batch_size) for c in job.spec.runs] == [
        ("fp32", 32), (amp_mode, 32), ("fp32", 64), (amp_mode, 64)]
    wait_until_idle(page)
    page.get_by_role("button", name="Just show me").click()  # the predict-then-check box holds the results back
    wait_until_idle(page)
    assert_no_exception(page)

    # From here on the test only looks: no reload, no click, no key press.
    page.evaluate("() => { window.__sweepTestMark = true; }")
    running, early = [], []
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while True:
        seen = page.evaluate(SNAPSHOT_JS, NOT_YET)
        stored = store.get_job(job.id)  # read after the page, so it is at least as new as what the page showed
        final = [v for v in seen["verdicts"] if not PARTIAL.match(v)]
        if final and len(stored.outcomes) < len(job.spec.runs):
            early.append((final, len(stored.outcomes)))
        if stored.status == "running":
            running.append(seen)
        if final and stored.finished and not seen["progress"]:
            break
        assert time.monotonic() < deadline, f"no verdict {SWEEP_TIMEOUT_S} s after queueing: {seen}"
        page.wait_for_timeout(SAMPLE_EVERY_MS)

    assert not early, f"a verdict before every run was in: {early}"
    assert stored.status == "done", stored.error
    captions = {seen["progress"][0] for seen in running if seen["progress"]}
    assert any("run 1 of 4" in c for c in captions) and any("run 4 of 4" in c for c in captions), captions
    assert any(seen["progress"] and (seen["notYet"] or seen["verdicts"]) for seen in running), running[-1]
    partial = {int(PARTIAL.match(v).group(1)) for seen in running for v in seen["verdicts"] if PARTIAL.match(v)}
    assert 2 in partial, f"never seen with batch 32 done in both modes and batch 64 to come: {sorted(partial)}"

    (verdict,) = seen["verdicts"]
    assert verdict.startswith(f"Verdict: On this machine, {amp_mode} "), verdict
    # The table's cells sit in a hidden accessible table that the data grid fills a moment after it is drawn.
    # The page's last rerun may leave the running sweep's table on it for a moment beside the new one: wait for one.
    # Read in the same moment as the check: the grid fills its hidden table row by row as it redraws, and the page's
    # last rerun may leave the running sweep's table beside the new one for a moment. Wait for one, whole.
    whole = ("(t) => t.includes('speedup vs fp32') && t.split(amp).length === 3 && t.split('baseline').length === 3")
    table = page.wait_for_function(
        f"([notYet, amp]) => {{ const found = ({SNAPSHOT_JS})(notYet).tables.filter({whole}); "
        "return found.length === 1 ? found[0] : null; }", arg=[NOT_YET, amp_mode]).json_value()
    assert table.count(amp_mode) == 2 and table.count("baseline") == 2, table
    assert page.evaluate("() => window.__sweepTestMark === true"), "the page was loaded again"
    assert page.url == f"{url}/when-amp-pays"
    assert_no_exception(page)



# ---- issue 24: the step's budget, its profile, the roofline and the ladder in a real browser ----------------------

CHART_TITLES_JS = """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
  .filter((chart) => chart.querySelector('svg g.role-mark') !== null)
  .map((chart) => (chart.querySelector('g.role-title text') || {}).textContent || '?')"""


# The roofline table's GFLOP cells, or null until its header and rows are there.
ROOFLINE_GFLOP_JS = """() => {
  const table = [...document.querySelectorAll('[data-testid="stTable"]')]
    .find((t) => t.innerText.includes('MB, fp32 / AMP'));
  if (!table) return null;
  const column = [...table.querySelectorAll('thead th')].map((th) => th.innerText.trim()).indexOf('GFLOP');
  const cells = [...table.querySelectorAll('tbody tr')]
    .map((tr) => (tr.querySelectorAll('th, td')[column] || {}).innerText);
  return column < 0 || cells.length === 0 || cells.some((c) => !c) ? null : cells;
}"""


def drawn_chart_titles(page, at_least: int) -> list[str]:
    """The titles of the charts Vega has drawn (an svg with marks), once at least `at_least` are."""
    page.wait_for_function(f"() => ({CHART_TITLES_JS})().length >= {at_least}")
    return page.evaluate(CHART_TITLES_JS)


def test_when_amp_pays_draws_the_roofline_and_ladder_with_the_counted_flops(page, lab):
    url, _ = lab
    open_settled(page, f"{url}/when-amp-pays", "AMP pays off")
    # A ladder answers only for its own class of machine: shown where one was recorded on a machine like this one.
    ladder_here = bool(newest_ladders(like=machine_of(hardware_report("cpu"))))
    titles = drawn_chart_titles(page, at_least=3 if ladder_here else 2)
    assert "The lab's layers on this device's roofline" in titles
    assert ("The ladder to the fastest lab run" in titles) == ladder_here

    # The step's arithmetic, counted again here from the layers' shapes, not with the page's FLOP counter.
    flops = shape_flops(1, 256)
    text = page.locator('[data-testid="stMain"]').inner_text()
    tf32_us = flops / (PUBLISHED_PEAKS["H200 SXM"]["tf32"] * 1e12) * 1e6
    assert f"{flops / 1e9:.2f} GFLOP" in text and f"TF32 everywhere: {tf32_us:.1f} µs" in text
    # The roofline's table: one row per layer; its GFLOP column adds up to the same count (each cell rounded). Read
    # in one moment, once whole: right after the sweep test, on the same server, the first read found no header.
    cells = page.wait_for_function(ROOFLINE_GFLOP_JS).json_value()
    assert len(cells) >= 8
    assert sum(float(cell) for cell in cells) == pytest.approx(flops / 1e9, abs=0.0005 * len(cells))


def test_results_shows_a_profiled_runs_budget_and_its_step_by_kind_of_work(page, lab):
    url, _ = lab
    open_settled(page, f"{url}/results?job=recorded-profiled", "Results")
    assert "One step by kind of work (profiled window)" in drawn_chart_titles(page, at_least=5)
    text = page.locator('[data-testid="stMain"]').inner_text()
    config = profiled_comparison()[0].config
    assert f"{shape_flops(config.width, config.batch_size) / 1e9:.2f} GFLOP" in text  # the budget's table
    assert "Measured peaks on CPU: recorded (torch 2.14.1)" in text
    (before, after) = PROFILED_MS
    assert (f"the largest changes: matrix products {before['matrix products']:.1f} → {after['matrix products']:.1f} "
            f"ms; pooling {before['pooling']:.1f} → {after['pooling']:.1f} ms") in text


# ---- issue 13: labels at 800 px --------------------------------------------------------------------------------------

# One place for what each chart's discrete axis (the names: x on a line chart's epochs, y on a bar chart lying on its
# side) shows: every label, whether Vega drew it and where.
AXES_JS = """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].map((chart) => {
  const title = chart.querySelector('g.role-title text');
  const axis = [...chart.querySelectorAll('g.role-axis')].find(
    (a) => (a.getAttribute('aria-label') || '').includes('discrete scale')) || null;
  return {
    chart: title ? title.textContent : '?',
    svg: chart.querySelector('svg') !== null,
    discrete: axis !== null,
    labels: axis === null ? [] : [...axis.querySelectorAll('g.role-axis-label text')].map((text) => {
      const box = text.getBoundingClientRect();
      return {text: [...text.querySelectorAll('tspan')].map((t) => t.textContent).join(' ') || text.textContent,
              drawn: text.getAttribute('opacity') !== '0' && text.textContent !== '',
              left: box.left, right: box.right, top: box.top, bottom: box.bottom};
    }),
    legend: [...chart.querySelectorAll('g.role-legend-label text')].map((text) => {
      const box = text.getBoundingClientRect();
      return {text: text.textContent, left: box.left, right: box.right};
    }),
    marks: [...chart.querySelectorAll('g.role-mark text')].map((text) => {
      const box = text.getBoundingClientRect();
      return {text: text.textContent, right: box.right};
    }),
    width: chart.querySelector('svg') === null ? 0 : chart.querySelector('svg').getBoundingClientRect().right,
  };
})"""


def settled_axes(page, charts: int) -> list[dict]:
    """The charts' x axes once all `charts` are drawn and two readings 300 ms apart agree (Vega lays a chart out
    again when Streamlit tells it its width)."""
    page.locator('[data-testid="stVegaLiteChart"] svg').nth(charts - 1).wait_for()
    before = page.evaluate(AXES_JS)
    for _ in range(40):
        page.wait_for_timeout(300)
        now = page.evaluate(AXES_JS)
        if now == before and all(chart["svg"] for chart in now):
            return now
        before = now
    pytest.fail(f"the charts kept changing: {now}")


def overlaps(a: dict, b: dict) -> bool:
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > 0.5
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 0.5)


@pytest.mark.parametrize("name", [
    "one-pair-cpu", "three-pairs", "gpu-memory-figures",
])
def test_comparison_charts_at_800_px_show_every_name_and_legend_entry_without_overlap(page, lab, name):
    url, _ = lab
    page.set_viewport_size({"width": 800, "height": 1000})
    # A shared link: any finished comparison on the server.
    open_settled(page, f"{url}/results?job=recorded-{name}", "Results")
    axes = [chart for chart in settled_axes(page, charts=5) if chart["discrete"]]

    assert {"Total training time", "Peak memory", "Throughput"} <= {chart["chart"] for chart in axes}, axes
    problems = []
    for chart in axes:
        drawn = [label for label in chart["labels"] if label["drawn"]]
        hidden = [label["text"] for label in chart["labels"] if not label["drawn"]]
        if hidden:  # Streamlit's theme turns Vega's labelOverlap on: a label that would collide is not drawn
            problems.append(f"{chart['chart']}: labels hidden by Vega to avoid overlap: {hidden}")
        problems += [f"{chart['chart']}: {a['text']!r} overlaps {b['text']!r}"
                     for i, a in enumerate(drawn) for b in drawn[i + 1:] if overlaps(a, b)]
    # A legend lists every run inside the chart: one in a row above the chart was cut off after three runs.
    runs = 2 * RECORDED[name][0]
    memory = next(chart for chart in axes if chart["chart"] == "Peak memory")
    if len(memory["legend"]) != runs:
        problems.append(f"Peak memory: the legend lists {len(memory['legend'])} of {runs} runs")
    problems += [f"{chart['chart']}: the legend's {entry['text']!r} is cut off at the chart's edge"
                 for chart in axes for entry in chart["legend"] if entry["right"] > chart["width"] + 0.5]
    problems += [f"{chart['chart']}: the text {mark['text']!r} on a bar is cut off at the chart's edge"
                 for chart in axes for mark in chart["marks"] if mark["right"] > chart["width"] + 0.5]
    assert not problems, "at 800 px: " + "; ".join(problems)


# ---- issue 25, item 7: no table cut at 800 px ------------------------------------------------------------------------

# Every table and grid on the page outside a closed expander: how much wider its content is than the room it has
# (Streamlit's grid scrolls sideways inside a fixed box; an HTML table scrolls inside its wrapper).
CLIPPED_JS = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  return [...main.querySelectorAll('[data-testid="stTable"], [data-testid="stDataFrame"]')]
    .filter((el) => el.getBoundingClientRect().width > 0)
    .map((el) => {
      const boxes = [el, ...el.querySelectorAll('*')].filter((box) =>
        ['auto', 'scroll', 'hidden'].includes(getComputedStyle(box).overflowX));
      const over = Math.max(0, ...boxes.map((box) => box.scrollWidth - box.clientWidth));
      const head = [...el.querySelectorAll('th, [role="columnheader"]')].map((h) => h.innerText.trim());
      return {kind: el.dataset.testid, over, columns: head.filter(Boolean).slice(0, 10)};
    });
}"""


def tables_cut_at_800(page, url: str, path: str, words: str) -> list[dict]:
    page.set_viewport_size({"width": 800, "height": 1000})
    page.goto(f"{url}/{path}")
    heading(page, words).wait_for()
    wait_until_idle(page)
    page.wait_for_timeout(1500)  # the grids size their columns after they are drawn
    return [table for table in page.evaluate(CLIPPED_JS) if table["over"] > 1]


def test_no_table_on_results_or_history_is_cut_at_800_px(page, lab):
    url, _ = lab
    cut = tables_cut_at_800(page, url, "results?job=recorded-three-pairs", "Results")
    cut += tables_cut_at_800(page, url, "history", "History")
    page.get_by_text("Whole class", exact=True).first.click()  # the recorded jobs are another learner's
    wait_until_idle(page)
    page.wait_for_timeout(1500)
    cut += [table for table in page.evaluate(CLIPPED_JS) if table["over"] > 1]
    assert not cut, f"cut at 800 px: {cut}"


CODE_OVER_JS = """() => [...document.querySelectorAll('[data-testid="stCode"] pre')]
  .filter((pre) => pre.getBoundingClientRect().width > 0).map((pre) => pre.scrollWidth - pre.clientWidth)
  .filter((over) => over > 1)"""


@pytest.mark.parametrize(("path", "words"), [
    ("number-formats", "Number formats"), ("baseline", "fp32 baseline"), ("adding-amp", "Adding AMP"),
    ("autocast", "Autocast"), ("when-amp-pays", "AMP pays off"), ("recipe", "recipe"),
])
def test_the_learn_pages_tables_and_code_fit_at_800_px_with_every_expander_open(page, lab, path, words):
    url, _ = lab
    tables_cut_at_800(page, url, path, words)
    for summary in page.locator('[data-testid="stExpander"] summary').all():
        summary.click()
    wait_until_idle(page)
    page.wait_for_timeout(1500)
    cut = [table for table in page.evaluate(CLIPPED_JS) if table["over"] > 1]
    assert not cut and not page.evaluate(CODE_OVER_JS), f"{path} at 800 px: tables {cut}, code lines over by " \
                                                       f"{page.evaluate(CODE_OVER_JS)} px"


CHARTS_OVER_JS = """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
  .filter((chart) => chart.querySelector('svg') && chart.getBoundingClientRect().width > 0)
  .map((chart) => {
    const title = chart.querySelector('g.role-title text');
    // The room is the main column's, not the chart's own box, which grows with a chart too wide for the page.
    const block = document.querySelector('[data-testid="stMainBlockContainer"]') || document.querySelector('[data-testid="stMain"]');
    const style = getComputedStyle(block);
    const room = Math.min(chart.getBoundingClientRect().right,
                          block.getBoundingClientRect().right - parseFloat(style.paddingRight || '0'));
    const legend = [...chart.querySelectorAll('g.role-legend-label text')].map((t) => t.getBoundingClientRect().right);
    return {chart: title ? title.textContent : '?', over: Math.max(0, ...legend, chart.querySelector('svg')
      .getBoundingClientRect().right) - room};
  }).filter((chart) => chart.over > 1)"""


def test_the_breakdown_and_the_autocast_grid_and_their_legends_fit_at_800_px(page, lab):
    from tests.ui_fixtures import finished_job, make_result

    url, store = lab
    parts = [make_result("fp32", config={"loader": loader}, data_wait_s=wait, compute_s=2.0)
             for loader, wait in (("dataloader", 3.0), ("resident", 0.1))]
    store.save_job(finished_job("breakdown-800", parts, "where the time goes: DataLoader vs resident (fp32, batch 256)",
                                kind="breakdown", purpose="breakdown"))
    tables_cut_at_800(page, url, "when-amp-pays", "AMP pays off")
    titles = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"] g.role-title text')]
      .map((t) => t.textContent)""")
    assert "Where the training time goes" in titles
    over = page.evaluate(CHARTS_OVER_JS)
    tables_cut_at_800(page, url, "autocast", "Autocast")
    page.get_by_role("button", name="Just show me").click()  # the grid of every mode follows the reveal
    wait_until_idle(page)
    page.wait_for_timeout(1500)
    over += page.evaluate(CHARTS_OVER_JS)
    assert not over, f"charts or legends past their box at 800 px: {over}"
